# Config loading, schema validation, and every path pattern and input function of the workflow.
import json
import math
import os
import shlex
import sys

from snakemake_interface_executor_plugins.settings import DeploymentMethod

from stages.lib.artifacts import MIXTURE, code_patch_file, code_version, write_once
from stages.lib.config_checks import command_line_errors, cross_field_errors, missing_chat_template, schema_errors
from stages.lib.data.schema import FILES as TINY_DATA_FILES
from stages.lib.data.sources import local_files, local_path
from stages.lib.configs import GRPOStageConfig, default_of
from stages.lib.hub import offline_controller_problem, pin_revisions
from stages.lib.recipe import REWARD_MODEL_KINDS, STAGES, stage_of, template_of
from stages.lib.rewards.external import own_reward_files
from stages.lib.save_lead import DEFAULT_WRITE_GB_S, parameter_count, save_lead_s, step_seconds
from stages.lib.settings import (cold_start_source, compute_settings, container_images, job_wall_hours, settings_at,
                                 uses_launcher, without_removed_keys)

without_removed_keys(config)  # a null in a layered file removes the key (`base: {build: null}`)
CONFIG_ERRORS = schema_errors(config) or cross_field_errors(config)  # the second reads keys the first checked
if CONFIG_ERRORS:
    COMMAND_LINE = dict(workflow.config_settings.config)  # --config
    CONFIG_FILES = [os.path.relpath(path) for path in workflow.overwrite_configfiles] or ["configs/tiny.yaml"]
    PROBLEMS = "\n  ".join(command_line_errors(CONFIG_ERRORS, COMMAND_LINE, CONFIG_FILES))
    WHERE = " + ".join(CONFIG_FILES + ["--config"] * bool(COMMAND_LINE))
    raise ValueError(f"invalid config ({WHERE}):\n  {PROBLEMS}")
pin_revisions(config)  # hub_revisions into each source and model of a pinned id: what the rules pass on
START_FROM = config.get("start_from", {})
if START_FROM:
    from stages.lib.start_from import artifact_problems, link_brought

    ARTIFACT_ERRORS = [problem for stage, path in START_FROM.items() for problem in artifact_problems(stage, path)]
    if ARTIFACT_ERRORS:
        PROBLEMS = "\n  ".join(ARTIFACT_ERRORS)
        raise ValueError(f"start_from names unusable artifacts:\n  {PROBLEMS}")

wildcard_constraints:
    shard=r"\d+",
    student=r"[A-Za-z0-9]+",
    kind=r"helpful|harmless",


RUN_DIR = os.path.join(config["results_dir"], config["run_name"])
# Compute jobs never reach the hub (clusters' compute nodes often cannot): data and models are
# fetched into the run by local rules first, which opt back in with ONLINE.
# The stage modules come from this checkout, also inside a container image (which holds only packages).
# Outside containers, jobs run this workflow's own environment (the interpreter running Snakemake, and
# its console scripts), whatever the caller's PATH holds.
IN_CONTAINERS = DeploymentMethod.APPTAINER in workflow.deployment_settings.deployment_method
OWN_PATH = "" if IN_CONTAINERS else f" PATH={shlex.quote(os.path.dirname(sys.executable))}:$PATH"
PYTHONPATH_TAIL = "${{PYTHONPATH:+:$PYTHONPATH}}"  # doubled braces: Snakemake formats the prefix too
CODE_VERSION = code_version()
# A dirty checkout's changes: a patch in the run's folder, written when jobs start (a dry run writes none),
# which every manifest of this plan names (R1_CODE_PATCH).
CODE_PATCH, CODE_CHANGES = code_patch_file(RUN_DIR) if CODE_VERSION.endswith("-dirty") else (None, "")
shell.prefix(
    "set -euo pipefail; export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1"
    f" R1_CODE_VERSION={shlex.quote(CODE_VERSION)}"
    + (f" R1_CODE_PATCH={shlex.quote(str(CODE_PATCH))}" if CODE_PATCH else "")
    + f" PYTHONPATH={shlex.quote(workflow.basedir)}{PYTHONPATH_TAIL}{OWN_PATH}; "
)


onstart:
    if CODE_PATCH:
        write_once(CODE_PATCH, CODE_CHANGES)
ONLINE = "env -u HF_HUB_OFFLINE -u HF_DATASETS_OFFLINE -u TRANSFORMERS_OFFLINE"


def result(*parts):
    """results/<run>/<parts...>: every artifact path is built here."""
    return os.path.join(RUN_DIR, *parts)


def work_dir(stage):
    """Checkpoints live beside the outputs, never inside them: Snakemake deletes outputs before a rerun."""
    return result(".work", stage)


def artifact(stage):
    """A stage's output as the stages after it read it: the user's own artifact when the config brings
    one (`start_from`), which takes the stage and everything only it needed out of the DAG."""
    return BROUGHT.get(stage, result(stage))


# Each brought artifact through its link in the run's folder, renewed when its content changes (start_from.py)
BROUGHT = {stage: link_brought(path, result("start_from", stage)) for stage, path in START_FROM.items()}


def log_file(stage):
    return result("logs", f"{stage}.log")


def benchmark_file(stage):
    return result("benchmarks", f"{stage}.tsv")


# Data sets: the tiny config generates its sets (rule tiny_data, into data/); data.hub.sets prepares sets from
# their sources (rule prepare_data, a job and a folder per set), beside data.tiny in place of the generated ones.
PREPARED_SETS = list(config["data"].get("hub", {}).get("sets", {}))
GENERATED_SETS = [name for name in TINY_DATA_FILES if name not in PREPARED_SETS] if "tiny" in config["data"] else []


def prepared_dir(name):
    return result("prepare_data", name)


def data_file(name):
    """The file a data set is read from, whichever rule makes it."""
    if name in PREPARED_SETS:
        return os.path.join(prepared_dir(name), f"{name}.parquet")
    return result("data", f"{name}.parquet")


def data_input(name, rule):
    """An input function for `rule`: the data set's file (`name` may hold the rule's wildcards). A set that no
    rule makes is an error only when a job that reads it is planned (a target needs only the sets it reads)."""

    def path(wildcards):
        stem = name.format(**wildcards)
        if stem not in PREPARED_SETS and stem not in GENERATED_SETS:
            generated = f"; the tiny data generates {', '.join(GENERATED_SETS)}" if GENERATED_SETS else ""
            raise ValueError(f"data.hub.sets has no '{stem}' (rule {rule} reads it); give its sources there{generated}")
        return data_file(stem)

    return path


EVAL_SETS = [name for name in GENERATED_SETS + PREPARED_SETS if name.startswith("eval_")]


def prepare_data_input(wildcards):
    """A set's local source files (editing one reruns the set and every job that reads it; a directory: its
    files) and, for a training set, every evaluation set of the run, whose prompts it must not share."""
    local = [local_path(source["path"]) for source in config["data"]["hub"]["sets"][wildcards.set]]
    files = [str(file) for path in local if path is not None for file in local_files(path)]
    evaluation = [] if wildcards.set.startswith("eval_") else [data_file(name) for name in EVAL_SETS]
    return {"sources": files, "eval_sets": evaluation}


def stage_args(section, exclude=()):
    """A config section as `--key value` flags for the stage CLI (its dataclass fields), a mapping as
    one JSON argument; `exclude` names the section's wiring keys, which are not flags."""
    flags = []
    for key, value in section.items():
        if key in exclude:
            continue
        if isinstance(value, dict):  # trainer_args: one JSON object
            flags.append(f"--{key} {shlex.quote(json.dumps(value, sort_keys=True))}")
            continue
        values = value if isinstance(value, list) else [value]
        flags.append(f"--{key} " + " ".join(shlex.quote(str(v).lower() if isinstance(v, bool) else str(v)) for v in values))
    return " ".join(flags)


def tracking_args(stage, grpo=False):
    """The `tracking` section as a training stage's flags, each stage its own run (<run_name>/<stage>).
    None when nothing is tracked, so turning tracking on is the only change that reruns stages for it."""
    tracking = config["tracking"]
    if not tracking["report_to"]:
        return ""
    flags = {"report_to": tracking["report_to"], "run_name": f"{config['run_name']}/{stage}",
             "tensorboard_dir": result("tensorboard", stage),
             **({"project": tracking["project"]} if "project" in tracking else {}),
             **({"log_completions": tracking.get("log_completions", False)} if grpo else {})}
    return f" {stage_args(flags)}"


def training_params(stage, exclude=()):
    """The params of a training rule: the seed, how the stage starts (its module, maybe through
    stages.launch) and its flags: the job's name (its output folder: `--kind` for a reward model),
    template (RL stages), work directory, settings (less `exclude`, the section's wiring keys) and
    tracking. A stage with a job per reward model kind or per student takes them from the job's
    wildcards."""
    spec = STAGES[stage]
    rl = spec.kind == "grpo"

    def args(wildcards):
        values = dict(wildcards.items())
        name = spec.output.format(**values)
        naming = f"--kind {values['kind']}" if spec.kind == "reward_model" else f"--stage {name}"
        flags = naming + (f" --template {spec.template}" if rl else "") + f" --work_dir {work_dir(name)}"
        settings = settings_at(config, spec.settings.format(**values))
        if "student" in values:  # a student's own `sft` keys, over distill.sft
            settings = {**settings, **config["distill"]["students"][values["student"]].get("sft", {})}
        return f"{flags} {stage_args(settings, exclude)}{tracking_args(name, grpo=rl)}"

    return {"seed": config["seed"], "launch": launcher(stage, spec.module), "args": args}


def reward_files(stage):
    """The files defining a GRPO stage's own rewards (`file.py:function`, `module:function`): inputs, so that
    editing one reruns the stage."""
    return list(own_reward_files(settings_at(config, STAGES[stage].settings).get("rewards", [])).values())


# The shell tail of every training rule
TRAINED_INTO = " --output_dir {output} --seed {params.seed} {params.args} > {log} 2>&1"


def student_base(student):
    return STAGES["student"].output.format(student=student)


JUDGE = config["rejection_sampling"].get("judge")  # a generative judge for some domains; off when absent


def judge_inputs():
    return {"judge": model_path("judge")} if JUDGE else {}


def judge_args():
    """rejection_sampling.judge as the stage's --judge_* flags (its model is an input)."""
    if not JUDGE:
        return ""
    flags = {f"judge_{key}": value for key, value in JUDGE.items() if key not in ("name_or_path", "revision")}
    return f"--judge_model {shlex.quote(model_path('judge'))} {stage_args(flags)}"


def judged_domains_arg():
    """The judged domains alone, for the projection, which judges nothing (it counts them unjudged)."""
    return stage_args({"judge_domains": JUDGE["domains"]}) if JUDGE else ""


PUBLISHED = {f"published_{name}": spec for name, spec in config["evaluation"].get("published", {}).items()}


def pretrained_model_spec(stage):
    """The `build` / `name_or_path` section of a pre-trained model (the base, a student's, the judge's, a
    published model's)."""
    if stage == "base":
        return config["base"]
    if stage == "judge":
        return JUDGE
    if stage in PUBLISHED:
        return PUBLISHED[stage]
    if stage.startswith("student_"):
        return config["distill"]["students"][stage.removeprefix("student_")]
    return None


def pretrained_source(stage):
    """build: pre-trained here (tiny); local: a model directory the user has; hub: fetched into the run."""
    spec = pretrained_model_spec(stage)
    if "build" in spec:
        return "build"
    return "local" if os.path.isdir(spec["name_or_path"]) else "hub"


def pretrained_stages(source):
    stages = ["base"] + [student_base(name) for name in config["distill"]["students"]] + ["judge"] * bool(JUDGE)
    stages += list(PUBLISHED)
    return [stage for stage in stages if pretrained_source(stage) == source]


def chat_template_of(model):
    """The `chat_template` of pre-trained `model` (base, student_<name>), as a list: empty for a model of this run
    or one that keeps its own. The stages that start from the model and render chats (SFT, reward models) apply
    it and save their model with it, and every later stage reads it from there (stages/lib/chat_template.py)."""
    spec = pretrained_model_spec(model) or {}
    return [spec["chat_template"]] if "chat_template" in spec else []


def chat_template_input(model, rule):
    """An input function for `rule`, which renders chats over pre-trained `model` (a name, or a function of the
    wildcards giving one): its chat_template file, so that editing it reruns the rule; a model with no template
    is an error only when such a job is planned."""

    def inputs(wildcards):
        name = model(wildcards) if callable(model) else model
        stage, values = stage_of(name)  # a model of this run has no pre-trained spec, so no problem
        problem = missing_chat_template(stage.settings.format(**values), pretrained_model_spec(name) or {}, rule)
        if problem:
            raise ValueError(problem)
        return chat_template_of(name)

    return inputs


def chat_template_arg(model):
    return "".join(f" --chat_template {shlex.quote(path)}" for path in chat_template_of(model))


def model_path(stage):
    """The model directory a stage's output is read from: every model is a local directory by the time a
    compute job loads it (a user's own directory is used in place)."""
    spec = pretrained_model_spec(stage)
    if spec is not None and pretrained_source(stage) == "local":
        return spec["name_or_path"]
    return artifact(stage)


# ---- compute: Slurm resources and launchers -------------------------------------------------------
# compute keys that are not Slurm resources: how the stage launches, and the planning estimate
NOT_RESOURCES = ("accelerate_config", "mixed_precision", "vllm_server_gpus", "vllm_server_tensor_parallel_size",
                 "vllm_server_startup_s", "estimated_hours", "estimated_gpu_hours", "gpu_speed", "reference",
                 "checkpoint_write_gb_s")
TRAINING_KINDS = ("pretraining", "grpo", "sft", "reward_model")  # the stages that checkpoint and stop on SIGTERM


def save_lead(stage):
    """stages/lib/save_lead.py: the seconds before its time limit at which a training job is told to save, from
    the model it starts from (counted when the job is scheduled, once that model exists), at most half the
    job's runtime."""
    settings = compute_settings(config, stage)
    pattern = STAGES[stage].settings
    step_s = step_seconds(job_wall_hours(settings),
                          settings_at(config, pattern).get("max_steps") if "{" not in pattern else None)
    nodes = settings.get("nodes", 1)
    writing_nodes = nodes - 1 if nodes > 1 and settings.get("vllm_server_gpus") else nodes
    write_gb_s = settings.get("checkpoint_write_gb_s", DEFAULT_WRITE_GB_S)
    half_runtime_s = settings["runtime"] * 30 if "runtime" in settings else math.inf

    def lead(wildcards, input):
        model = getattr(input, "model", None)  # a model pre-trained here starts from none
        return min(save_lead_s(model and parameter_count(model), writing_nodes, write_gb_s, step_s), half_runtime_s)

    return lead


def signal_option(stage):
    """sbatch options of a training job: the compute entry's own, then the early SIGTERM (every process of
    the job's steps gets it; the trainers finish their step and save)."""
    own, lead = compute_settings(config, stage).get("slurm_extra", ""), save_lead(stage)
    return lambda wildcards, input: " ".join(filter(None, [own, f"--signal=TERM@{int(lead(wildcards, input))}"]))


def stage_resources(stage):
    """Snakemake resources for the Slurm executor. `gpu` in the config counts GPUs per node: a multi-node
    job asks for them per node (gres) and runs one launcher task per node through srun (`mpi`)."""
    resources = {k: v for k, v in compute_settings(config, stage).items() if k not in NOT_RESOURCES}
    if stage in STAGES and STAGES[stage].kind in TRAINING_KINDS:
        resources["slurm_extra"] = signal_option(stage)
    if "cpus_per_gpu" in resources:
        resources["cpus_per_task"] = 0  # masks a profile's default: the plugin takes cpus_per_task first
    nodes, gpus = resources.get("nodes", 1), resources.pop("gpu", 0)
    if nodes > 1:
        resources.update(mpi="srun", tasks=nodes, tasks_per_gpu=0, **({"gres": f"gpu:{gpus}"} if gpus else {}))
    elif gpus:
        resources.update(gpu=gpus, tasks_per_gpu=0)
    return resources


def launcher(stage, module):
    """How a training stage starts: a plain process, or stages.launch for several GPUs or nodes. `exec`: the
    rule's bash becomes the trainer (or launcher). Slurm's early time-limit signal reaches every process of
    the step; a bash still there would exit on it, the job's Snakemake would end the step at once, and Slurm
    would kill the trainers mid-save (gpu-path-audit-4, F3). The trainer saves, then Snakemake sees it end."""
    if not uses_launcher(compute_settings(config, stage)):
        return f"exec python -m {module}"
    settings = compute_settings(config, stage)
    flags = [f"--module {module}", f"--nodes {settings.get('nodes', 1)}", f"--gpus_per_node {settings.get('gpu', 0)}"]
    if settings.get("accelerate_config"):
        flags.append(f"--accelerate_config {os.path.join(workflow.basedir, settings['accelerate_config'])}")
    for key in ("mixed_precision", "vllm_server_gpus", "vllm_server_tensor_parallel_size", "vllm_server_startup_s"):
        if settings.get(key):
            flags.append(f"--{key} {settings[key]}")
    if IN_CONTAINERS:
        flags.append(f"--task_prefix {shlex.quote(task_container_prefix(stage))}")
    # The launcher runs on the host (srun, the allocation): with this workflow's own interpreter, also in
    # containers mode, where the job's PATH is the caller's and may hold no Python with the project's packages.
    # It gives the trainers as long to save after a stop signal as Slurm's early signal leaves them.
    command, lead = f"{shlex.quote(sys.executable)} -m stages.launch {' '.join(flags)}", save_lead(stage)
    return lambda wildcards, input: f"exec {command} --stop_grace_s {int(lead(wildcards, input))} --"


# ---- containers: with --sdm apptainer every job runs in an image built from containers/ ------------
IMAGES = container_images(config)


def image(flavour):
    """An image path (relative ones are in this checkout, where `make containers` builds them) or URI."""
    path = IMAGES[flavour]
    return path if "://" in path else os.path.join(workflow.basedir, path)


def stage_image(stage):
    return image("gpu" if compute_settings(config, stage).get("gpu", 0) else "cpu")


def container_image(stage):
    """The image Snakemake runs a stage's job in. None for jobs that start stages.launch: a container
    around the job would hide srun and the allocation, so the launcher runs on the host and starts each
    task in the image itself (task_container_prefix)."""
    return None if uses_launcher(compute_settings(config, stage)) else stage_image(stage)


def task_container_prefix(stage):
    """`apptainer exec` as Snakemake itself calls it (home = working directory, the profile's
    apptainer-args: --nv, site binds), for the launcher's tasks."""
    args = workflow.deployment_settings.apptainer_args
    return f"apptainer exec --home {shlex.quote(os.getcwd())} {args} {stage_image(stage)}"


def targets_arg(section):
    """A `targets` mapping as rejection sampling's DOMAIN=COUNT list."""
    return " ".join(f"{domain}={count}" for domain, count in section["targets"].items())


def reasoning_language():
    """The language reasoning RL rewarded: rejection sampling keeps CoTs in it."""
    return config["reasoning_rl"].get("language", default_of(GRPOStageConfig, "language"))


COLD_START_SOURCE = cold_start_source(config)


def cold_start_input():
    """What Dev1 learns: the data's cold-start rows, or the cold-start data built from R1-Zero's samples."""
    return artifact("cold_start_data") if COLD_START_SOURCE == "r1_zero" else data_input("cold_start", "cold_start_sft")


def cold_start_file(wildcards, input):
    """The file Dev1 trains on: the cold-start data folder's mixture, or the data file itself."""
    return os.path.join(input.data, MIXTURE) if COLD_START_SOURCE == "r1_zero" else input.data


def shard_file(shard):
    return result(STAGES["generate"].output, f"shard-{shard}.jsonl")


def all_shard_files():
    return [shard_file(i) for i in range(config["rejection_sampling"]["num_shards"])]


def projection_shards():
    """How many shards are sampled and projected before the others (0: none, every shard at once)."""
    count = config["rejection_sampling"].get("projection_shards", 0)
    return count if count < config["rejection_sampling"]["num_shards"] else 0


def projection_file():
    return result(STAGES["generate"].output, "projection.json")


def projection_gate(wildcards):
    """A later shard waits for the first shards' projection; ancient: a projection redone (other targets)
    does not resample the shards sampled after it."""
    return ancient(projection_file()) if projection_shards() and int(wildcards.shard) >= projection_shards() else []


def stage_outputs(*kinds):
    """The output folders of the recipe's stages of these kinds, in the recipe's order: one per reward
    model kind and per distillation student where the stage makes several."""
    outputs = []
    for stage in STAGES.values():
        if stage.kind in kinds:
            outputs += [stage.output.format(kind=kind, student=student)
                        for kind in (REWARD_MODEL_KINDS if "{kind}" in stage.output else [""])
                        for student in (config["distill"]["students"] if "{student}" in stage.output else [""])]
    return outputs


def distilled_students():
    return [STAGES["distill"].output.format(student=name) for name in config["distill"]["students"]]


def stage_reads(output):
    """The stage outputs a stage's job reads, as its rule's inputs name them: none for an artifact the config
    brings (start_from) or a model pre-trained elsewhere (a published one)."""
    if output in START_FROM:
        return []
    try:
        stage, values = stage_of(output)
    except KeyError:
        return []
    reward_models = [STAGES["reward_model"].output.format(kind=kind) for kind in REWARD_MODEL_KINDS]
    return {
        "r1_zero": ["base"],
        "cold_start_samples": ["r1_zero"],
        "cold_start_data": ["cold_start_samples"],
        "cold_start_sft": ["base"] + ["cold_start_data"] * (COLD_START_SOURCE == "r1_zero"),
        "reasoning_rl": ["cold_start_sft"],
        "generate": ["reasoning_rl"],
        "rejection_sampling": ["generate"],
        "mixture_sft": [config["mixture_sft"]["init"], "rejection_sampling"],
        "reward_model": [config["reward_model"]["init"]],
        "final_rl": ["mixture_sft", *reward_models],
        "distill": [student_base(values.get("student", "")), "rejection_sampling"],
    }.get(stage.name, [])


def needed_for(outputs):
    """These stage outputs and every one they are made from."""
    needed, pending = set(), list(outputs)
    while pending:
        output = pending.pop()
        if output not in needed:
            needed.add(output)
            pending += stage_reads(output)
    return needed


def eval_set_files(wildcards):
    """evaluation.sets: name -> the set's file (evaluate's inputs)."""
    return {name: data_input(stem, "evaluate")(wildcards) for name, stem in config["evaluation"]["sets"].items()}


def eval_set_args(wildcards, input):
    return " ".join(f"{name}={input[name]}" for name in config["evaluation"]["sets"])


def eval_dir(stage):
    return result("eval", stage)


def evaluated_models():
    """The config's models, then each published one (evaluation.published), evaluated by the same job."""
    return config["evaluation"]["models"] + list(PUBLISHED)


def evaluation_template(stage):
    return PUBLISHED[stage].get("template", "chat") if stage in PUBLISHED else template_of(stage)


def hub_downloads():
    """What the run downloads from the hub, as the rules write it: each fetched model, and each data set with
    a hub source (rule fetch, run on the login node, makes them all)."""
    sets = config["data"].get("hub", {}).get("sets", {})
    return [result(stage) for stage in pretrained_stages("hub")] + [
        os.path.join(prepared_dir(name), "manifest.json") for name, sources in sets.items()
        if any(local_path(source["path"]) is None for source in sources)]


# A controller launched as a batch job (README step 9) downloads what is not fetched yet on its compute
# node, where sites often have no internet: said here, in one line, before any job starts.
if workflow.is_main_process:
    OFFLINE = offline_controller_problem([path for path in hub_downloads() if not os.path.exists(path)])
    if OFFLINE:
        raise ValueError(OFFLINE)
