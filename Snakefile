import os

# r1-pipeline: the DeepSeek-R1 recipe as one DAG. Scale comes from the config file alone:
#   .venv/bin/snakemake all --profile profiles/local                                  # the embedded tiny config
#   .venv/bin/snakemake all --profile slurm --configfile configs/<scale>.yaml        # your site profile
# The embedded default is the tiny config; --configfile replaces it (to change a few keys, layer a small
# file on a whole one: --configfile configs/tiny.yaml mine.yaml).
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "configs", "tiny.yaml")



report: "docs/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/base.smk"
include: "rules/sft.smk"
include: "rules/grpo.smk"
include: "rules/rejection_sampling.smk"
include: "rules/reward_model.smk"
include: "rules/eval.smk"
include: "rules/report.smk"


rule all:
    input:
        rules.report.output,


rule fetch:
    # Every hub download of the run (models and data sets), on the login node: run it there before the
    # controller moves to a compute node (README step 9), where sites often have no internet.
    input:
        hub_downloads(),


rule r1_zero_branch:
    # The R1-Zero branch: GRPO straight on the base model, evaluated beside the base.
    input:
        eval_dir("base"),
        eval_dir("r1_zero"),


rule dev1:
    input:
        eval_dir("cold_start_sft"),


rule dev2:
    input:
        eval_dir("reasoning_rl"),


rule dev3:
    input:
        eval_dir("mixture_sft"),


rule published:
    # The published models of evaluation.published, evaluated as the pipeline's own are: run it first, to
    # check the evaluation against their authors' figures before spending GPU-hours on training.
    input:
        [eval_dir(stage) for stage in PUBLISHED],


rule final:
    # R1 alone, evaluated.
    input:
        eval_dir("final_rl"),


rule r1:
    # The main line to R1, every model of it evaluated.
    input:
        [eval_dir(stage) for stage in ("base", "cold_start_sft", "reasoning_rl", "mixture_sft", "final_rl")],


rule distilled:
    # Every distilled student, evaluated.
    input:
        [eval_dir(student) for student in distilled_students()],
