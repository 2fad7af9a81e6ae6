# The two commands of the README, and the environment they share.
#   make tiny   set up, run the whole pipeline on the tiny config, print the results table
#   make test   set up, run the test suite
#   make containers   build the Apptainer images (on a machine with Apptainer)
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Stage jobs run `python -m stages.<stage>`: the project's interpreter must come first on PATH.
export PATH := $(BIN):$(PATH)

.PHONY: setup tiny test containers

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

setup: $(STAMP)

tiny: $(STAMP)
	snakemake --profile profiles/local all
	python -m stages.report --show results/tiny/report

test: $(STAMP)
	python -m pytest -q

# `--fakeroot` builds without root where the site allows it; `make containers APPTAINER_BUILD=...` otherwise.
APPTAINER_BUILD ?= apptainer build --fakeroot --force
containers: containers/r1-cpu.sif containers/r1-gpu.sif

containers/r1-cpu.sif: containers/cpu.def containers/install.sh containers/requirements-cpu.txt
	$(APPTAINER_BUILD) $@ $<

containers/r1-gpu.sif: containers/gpu.def containers/install.sh containers/requirements-gpu.txt containers/requirements-gpu-build.txt
	$(APPTAINER_BUILD) $@ $<
