"""Before the first cluster run: what the site must still set, and what the plan will reserve.

    make preflight CONFIG=configs/qwen2.5-1.5b.yaml [TARGET=r1_zero_branch]
    python -m stages.preflight --configfile configs/qwen2.5-1.5b.yaml [--profile slurm] [--target r1_zero_branch]

The profile is found as Snakemake finds it (a path, or a name under ./, ~/.config/snakemake/ or
/etc/xdg/snakemake/). Plans the target's DAG (`all` unless --target names others) with it in the current directory
(Snakemake's dry run: nothing is submitted, nothing downloaded; what is done already is not planned again) and
- flags what would fail at the first sbatch or container start: the profile's site placeholders
  (`slurm_account: my_project`), bind paths this machine lacks, no `apptainer` (with the switch that
  runs without it), images not built, partitions that `sinfo` does not know;
- tries the code sandbox where the jobs will run it (bubblewrap in the GPU image), when some job runs
  model code;
- checks each job's GPUs, memory and CPUs per node and its time limit against its partition's nodes;
- prints, per stage, the GPU-hours the plan requests (jobs x GPUs x `runtime`) beside the estimate (the
  stage's work, `compute.<stage>.estimated_gpu_hours` on an H100, over `gpu_speed`: a job's wall time
  follows its GPUs), the totals, published figures the config names, and the critical path's wall time;
- warns where an estimate comes within a tenth of the time its submissions hold, and where a training stage's
  GPUs differ from the first config file's so that its per-GPU micro-batch (GRPO) or global batch (SFT, reward
  models) changes, with the gradient_accumulation_steps that keeps it.
Exit status 1 when something must be fixed first (warnings alone do not count).
"""

import argparse
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from stages.lib.config_checks import REPO, TRAINER_CONFIGS
from stages.lib.configs import GRPOStageConfig, default_of
from stages.lib.recipe import REWARD_MODEL_KINDS, STAGES
from stages.lib.rewards.sandbox import isolation_probe, isolation_problem
from stages.lib.settings import (
    compute_settings,
    container_images,
    job_wall_hours,
    layered_config,
    settings_at,
    training_world_size,
)

REFERENCE_GPU = "an H100 80GB"  # the GPU the configs' estimated_gpu_hours are stated for (gpu_speed: 1)
# Values the shipped profile holds where each site must put its own (profiles/slurm/config.yaml, SITE lines).
PLACEHOLDERS = {"slurm_account": "my_project"}
# Rules with `localrule: True` (rules/*.smk): they run on the login node, not as Slurm jobs (a test keeps
# this list equal to the rules').
LOGIN_NODE_RULES = ("tiny_data", "prepare_data", "fetch_model", "report", "all")
# The compute entry whose resources a rule's jobs take, where the rule's name is not the entry's.
COMPUTE_KEY_OF_RULE = {rule: stage.compute for stage in STAGES.values() for rule in (stage.rule, *stage.side_rules)
                       if rule != stage.compute}
# An estimate past this share of the time its submissions hold leaves no room for what the estimate leaves out: the
# save lead (each job hears SIGTERM minutes before its limit), a resume's start, a node a tenth slower than assumed.
TIME_LIMIT_MARGIN = 0.9


def workflow_targets() -> list[str]:
    """The targets: the rules the Snakefile itself declares (the other rules' outputs are stages' folders)."""
    return re.findall(r"^rule (\w+):", (REPO / "Snakefile").read_text(), re.M)


@dataclass
class PlannedJob:
    rule: str
    resources: dict[str, str]

    @property
    def compute_key(self) -> str:
        return COMPUTE_KEY_OF_RULE.get(self.rule, self.rule)

    @property
    def gpus(self) -> int:
        """GPUs the job holds over all its nodes: `gpu` on one node, `gres=gpu:N` per node on several."""
        per_node = self.resources.get("gpu") or self.resources.get("gres", "gpu:0").rpartition(":")[2]
        return int(per_node) * int(self.resources.get("nodes", 1))

    @property
    def runtime_hours(self) -> float:
        return int(self.resources.get("runtime", 0)) / 60

    @property
    def cpus_per_node(self) -> int:
        per_gpu = int(self.resources.get("cpus_per_gpu", 0))
        nodes = int(self.resources.get("nodes", 1))
        return per_gpu * (self.gpus // nodes) if per_gpu else int(self.resources.get("cpus_per_task", 0))


def planned_jobs(dry_run_output: str) -> list[PlannedJob]:
    """The Slurm jobs of a `snakemake -n -p` output (login-node rules and the targets, which run nothing, are left
    out)."""
    jobs, targets = [], workflow_targets()
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run_output)[1:]:
        header = re.match(r"(local)?rule (\w+):", block)
        resources = re.search(r"^\s*resources: (.*)$", block, re.M)
        if header.group(1) or header.group(2) in LOGIN_NODE_RULES or header.group(2) in targets:
            continue
        pairs = resources.group(1).split(", ") if resources else []
        jobs.append(PlannedJob(header.group(2), dict(pair.split("=", 1) for pair in pairs)))
    return jobs


def apptainer_available() -> bool:
    return any(shutil.which(name) for name in ("apptainer", "singularity"))


def uses_apptainer(profile: dict) -> bool:
    methods = profile.get("software-deployment-method", [])
    return "apptainer" in ([methods] if isinstance(methods, str) else methods)


def profile_resources(profile: dict) -> dict[str, str]:
    """`default-resources` as a mapping, whichever of the two forms (mapping, or `key=value` strings) it has."""
    resources = profile.get("default-resources") or {}
    if isinstance(resources, list):
        resources = dict(item.split("=", 1) for item in resources)
    return {key: str(value).strip("'\"") for key, value in resources.items()}


def bind_paths(apptainer_args: str) -> list[str]:
    """Host paths of `--bind`/`-B` options (`src[:dst[:opts]]`, comma-separated)."""
    words, paths = shlex.split(apptainer_args), []
    for flag, value in zip(words, words[1:]):
        if flag in ("--bind", "-B"):
            paths += [spec.split(":", 1)[0] for spec in value.split(",") if spec]
    for word in words:
        if word.startswith("--bind="):
            paths += [spec.split(":", 1)[0] for spec in word.removeprefix("--bind=").split(",") if spec]
    return paths


@dataclass
class PartitionLimits:
    """The most one node of a partition offers (the largest of its node types) and its time limit."""
    gpus_per_node: int = 0
    mem_mb: int = 0
    cpus: int = 0
    time_limit_min: float = math.inf


def sinfo_minutes(text: str) -> float:
    """A Slurm time limit (`2-00:00:00`, `48:00:00`, `30:00`, `infinite`) in minutes."""
    if text.strip() in ("infinite", "UNLIMITED", "n/a", ""):
        return math.inf
    days, _, clock = text.strip().rpartition("-")
    parts = [int(part) for part in clock.split(":")]
    hours, minutes, seconds = ([0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0, parts[0], 0)
    return (int(days or 0) * 24 + hours) * 60 + minutes + seconds / 60


def parse_sinfo(output: str) -> dict[str, PartitionLimits]:
    """`sinfo --noheader --format=%R|%G|%m|%c|%l` lines (one per node type of a partition)."""
    limits: dict[str, PartitionLimits] = {}
    for line in output.splitlines():
        if line.count("|") != 4:
            continue
        name, gres, mem, cpus, time_limit = (field.strip() for field in line.split("|"))
        gpus = max((int(count) for count in re.findall(r"gpu(?::[^:,(]+)?:(\d+)", gres)), default=0)
        known = limits.setdefault(name, PartitionLimits(time_limit_min=sinfo_minutes(time_limit)))
        known.gpus_per_node = max(known.gpus_per_node, gpus)
        known.mem_mb = max(known.mem_mb, int(re.sub(r"\D", "", mem) or 0))
        known.cpus = max(known.cpus, int(re.sub(r"\D", "", cpus) or 0))
    return limits


def slurm_partitions() -> dict[str, PartitionLimits] | None:
    """The cluster's partitions and what their nodes offer, as `sinfo` lists them; None where there is no
    sinfo (not a login node)."""
    if not shutil.which("sinfo"):
        return None
    done = subprocess.run(["sinfo", "--noheader", "--format=%R|%G|%m|%c|%l"], capture_output=True, text=True,
                          timeout=60)
    return parse_sinfo(done.stdout) if done.returncode == 0 else None


def profile_file_of(profile: str) -> Path:
    """The profile's config file, looked up as Snakemake looks it up (`--profile slurm` or a path)."""
    from snakemake.cli import get_appdirs, get_profile_dir

    found = get_profile_dir(profile)
    if found is None:
        user_dir = get_appdirs().user_config_dir
        raise SystemExit(f"preflight: no Snakemake profile {profile!r} (a directory with config.yaml, as a path or "
                         f"by name in ./, {user_dir}/ or /etc/xdg/snakemake/): `make site-profile` copies the "
                         f"template to {user_dir}/slurm/, or name the template itself: --profile profiles/slurm")
    return found[1]


def launch_command(configfiles: list[Path], profile: str, targets: list[str], *options: str) -> str:
    """The snakemake command line for this config and profile, targets first (--configfile takes every value
    after it)."""
    return shlex.join(["snakemake", *targets, "--profile", profile, *options, "--configfile", *map(str, configfiles)])


def profile_problems(profile_file: Path, profile: dict, without_images: str) -> list[str]:
    problems = []
    for key, value in profile_resources(profile).items():
        if PLACEHOLDERS.get(key) == value:
            problems.append(f"{profile_file}: default-resources.{key} is still the placeholder {value!r}: set your "
                            "site's value (the account: `sacctmgr show associations user=$USER format=account`), "
                            "or delete the line if your site has none")
    if uses_apptainer(profile):
        if not apptainer_available():
            problems.append("apptainer is not on PATH (the profile runs every job in an image): load it (e.g. "
                            "`module load apptainer`), or run without images, with this checkout and its .venv on a "
                            f"shared filesystem and the GPU packages in the venv: {without_images}")
        for path in bind_paths(str(profile.get("apptainer-args", ""))):
            if not Path(path).exists():
                problems.append(f"{profile_file}: apptainer-args binds {path}, which does not exist on this machine: "
                                "bind your site's shared filesystems instead")
    return problems


def image_problems(config: dict) -> list[str]:
    problems = []
    for flavour, image in container_images(config).items():
        if "://" not in image and not (REPO / image).exists():  # a file, or a sandbox directory
            problems.append(f"the {flavour} image {image} is not built: `make containers` on a machine "
                            f"with apptainer, or set containers.{flavour} in the config to an image you have")
    return problems


def runs_model_code(config: dict) -> bool:
    """Whether some job runs the model's programs: a `code` reward, a code evaluation set, code in the mixture."""
    rewarded = any(isinstance(section, dict) and "code" in section.get("rewards", []) for section in config.values())
    evaluated = "code" in config.get("evaluation", {}).get("sets", {})
    mixed = "code" in config.get("rejection_sampling", {}).get("targets", {})
    return rewarded or evaluated or mixed


def sandbox_problems(config: dict, profile: dict) -> list[str]:
    """The code sandbox tried where the jobs will run it: in the GPU image when the profile uses images
    (and apptainer is here), else on this machine. It needs unprivileged user namespaces, which many
    sites refuse inside Apptainer; the jobs check it when they start, this says so before anything is
    submitted. A login node's kernel can differ from the compute nodes': the message gives the check
    to run on one."""
    if not runs_model_code(config):
        return []
    probe = isolation_probe()
    if uses_apptainer(profile):
        image = container_images(config)["gpu"]
        image = image if "://" in image or Path(image).is_absolute() else str(REPO / image)
        command = ["apptainer", "exec", *shlex.split(str(profile.get("apptainer-args", ""))), image, *probe]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        problem = None if done.returncode == 0 else done.stderr.strip()[-300:] or f"exit {done.returncode}"
    else:
        command = probe
        problem = isolation_problem()
    if problem is None:
        return []
    return [f"the code sandbox (bubblewrap) cannot run here: {problem}. Jobs with a `code` reward, a code "
            "evaluation set or code in the mixture would stop when they start. Ask your site for unprivileged "
            "user namespaces on the compute nodes (check one with `srun --pty " + shlex.join(command) + "`), or "
            "leave code out of the config (the `code` reward, evaluation set and mixture target)"]


def partition_problems(jobs: list[PlannedJob], partitions: dict[str, PartitionLimits] | None) -> list[str]:
    """Each job's partition, GPUs, memory and CPUs per node and time limit against what sinfo lists."""
    if partitions is None:
        return []
    problems, seen = [], set()
    for job in jobs:
        name = job.resources.get("slurm_partition")
        if name is None or (name, job.compute_key) in seen:
            continue
        seen.add((name, job.compute_key))
        where = f"compute.{job.compute_key}"
        if name not in partitions:
            problems.append(f"partition {name!r} is not one sinfo lists ({', '.join(sorted(partitions))}): set "
                            "slurm_partition in the profile, or per stage in the config's compute section")
            continue
        node, nodes = partitions[name], int(job.resources.get("nodes", 1))
        asks = {"GPUs per node": (job.gpus // nodes, node.gpus_per_node, "gpu"),
                "memory (MB)": (int(job.resources.get("mem_mb", 0)), node.mem_mb, "mem_mb"),
                "CPUs per node": (job.cpus_per_node, node.cpus, "cpus_per_gpu or cpus_per_task")}
        for what, (asked, offered, key) in asks.items():
            if asked > offered:
                problems.append(f"{where}: {asked} {what} on partition {name!r}, whose nodes have {offered}: "
                                f"lower {key}")
        if job.runtime_hours * 60 > node.time_limit_min:
            problems.append(f"{where}: runtime {job.runtime_hours * 60:g} min is over partition {name!r}'s "
                            f"limit of {node.time_limit_min:g} min: lower runtime (the job resumes in the "
                            "profile's retries)")
    return problems


class SnakemakePlan:
    """What Snakemake plans for the targets with this config and profile (`-n -p`, or another planning mode), run in
    the background from the moment it is made: preflight's two plans take one core each instead of one after the
    other."""

    def __init__(self, configfiles: list[Path], profile: str, targets: list[str], without_apptainer: bool, *mode: str):
        self.command = [sys.executable, "-m", "snakemake", *(mode or ("-n", "-p")), *targets, "--profile", profile,
                        "-s", str(REPO / "Snakefile"), "-d", os.getcwd()]
        if without_apptainer:  # Snakemake asks for `apptainer --version` even in a dry run
            self.command += ["--sdm", "env-modules"]
        self.command += ["--configfile", *map(str, configfiles)]  # last: it takes every value after it
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        # files, not pipes: a plan that fills a pipe nobody reads yet would wait for the other one
        self.stdout, self.stderr = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(self.command, stdout=self.stdout, stderr=self.stderr, text=True, env=env)

    def output(self) -> str:
        """The plan's standard output, once Snakemake has ended; exits naming the command when it failed."""
        self.process.wait()
        stdout, stderr = (self.read(file) for file in (self.stdout, self.stderr))
        if self.process.returncode != 0:
            raise SystemExit(f"preflight: the dry run failed ({' '.join(self.command)}):\n"
                             f"{stdout[-3000:]}{stderr[-3000:]}")
        return stdout

    @staticmethod
    def read(file) -> str:
        file.seek(0)
        text = file.read()
        file.close()
        return text


def time_limit_warning(key: str, estimate: float | None, runtime_hours: float, submits: int,
                       retries: int) -> str | None:
    """A stage whose estimate comes within TIME_LIMIT_MARGIN of the time its submissions hold (submits x runtime:
    an estimate equal to runtime plans 1 submission with no room for the save lead or a slower node), and the
    three ways out."""
    if not estimate or not runtime_hours or estimate < TIME_LIMIT_MARGIN * runtime_hours * submits:
        return None
    hours = math.ceil(estimate / (TIME_LIMIT_MARGIN * submits))
    resubmit = (f"the profile's retries: {retries} allow it" if submits < 1 + retries
                else f"raise the profile's retries to {submits}")
    share = estimate / (runtime_hours * submits)
    return (f"compute.{key}: estimated {estimate:.3g} h fills {share:.0%} of runtime {runtime_hours:g} h x {submits} "
            f"submission(s) (over {TIME_LIMIT_MARGIN:.0%} leaves no room for the save lead or a slower node): raise "
            f"runtime to {hours * 60} ({hours} h), give the stage more GPUs, or accept one more submission "
            f"({resubmit})")


def batch_warning(section: str, config_class: type, settings: dict, reference: dict, world_size: int,
                  reference_world_size: int, reference_name: str) -> str | None:
    """What changes in a training stage's batch when its training processes differ from the reference config's:
    GRPO's completions per GPU per micro-step (a step's completions are fixed: activation memory follows), SFT's
    and the reward models' global batch (their micro-batch is per_device_train_batch_size); with the
    gradient_accumulation_steps that keeps it as it was. None where nothing changes, or a step does not split
    (the config check names that)."""
    def value(section_settings: dict, key: str) -> int:
        return section_settings.get(key, default_of(config_class, key))

    accumulation = value(settings, "gradient_accumulation_steps")
    if config_class is GRPOStageConfig:
        completions = value(settings, "questions_per_step") * value(settings, "num_generations")
        reference_completions = value(reference, "questions_per_step") * value(reference, "num_generations")
        reference_micro_steps = reference_world_size * value(reference, "gradient_accumulation_steps")
        if completions % (world_size * accumulation) or reference_completions % reference_micro_steps:
            return None
        now, before = completions // (world_size * accumulation), reference_completions // reference_micro_steps
        keeping = completions // (world_size * before) if completions % (world_size * before) == 0 else 0
        what = (f"{now} completions per GPU per micro-step ({completions} over {world_size} training processes x "
                f"gradient_accumulation_steps {accumulation})")
        units = "training processes"
    else:
        per_device = value(settings, "per_device_train_batch_size")
        now = per_device * world_size * accumulation
        before = (value(reference, "per_device_train_batch_size") * reference_world_size
                  * value(reference, "gradient_accumulation_steps"))
        keeping = before // (per_device * world_size) if before % (per_device * world_size) == 0 else 0
        what = (f"global batch {now} ({per_device} examples per GPU per micro-step x {world_size} GPUs x "
                f"gradient_accumulation_steps {accumulation})")
        units = "GPUs"
    if now == before:
        return None
    what += f", {before} on the {reference_world_size} {units} of {reference_name}"
    fix = (f"{section}.gradient_accumulation_steps: {keeping} keeps {before}" if keeping
           else f"no gradient_accumulation_steps keeps {before} on {world_size}")
    return f"{section}: {what}: {fix}"


def batch_warnings(config: dict, reference: dict, reference_name: str, compute_keys: set[str]) -> list[str]:
    """batch_warning for each training stage the plan runs (distillation's shared `distill.sft`; a student's own
    keys aside), its config section's batch against the reference config's (the scale config, before the files
    layered on it)."""
    warnings = []
    for stage in STAGES.values():
        if stage.kind not in TRAINER_CONFIGS or stage.compute not in compute_keys or "{student}" in stage.settings:
            continue
        world_size = training_world_size(config, stage.compute)
        reference_world_size = training_world_size(reference, stage.compute)
        if world_size == reference_world_size:
            continue
        for kind in REWARD_MODEL_KINDS if "{kind}" in stage.settings else ("",):
            section = stage.settings.format(kind=kind)
            warning = batch_warning(section, TRAINER_CONFIGS[stage.kind], settings_at(config, section),
                                    settings_at(reference, section), world_size, reference_world_size, reference_name)
            warnings += [warning] if warning else []
    return warnings


def gpu_hours_table(jobs: list[PlannedJob], config: dict, retries: int,
                    order: list[str] = ()) -> tuple[list[str], list[str], list[str]]:
    """One line per compute entry: jobs, GPUs and runtime per job, the expected wall time of a job, how many
    submissions it needs (a job past `runtime` resumes in a resubmitted one), GPU-hours requested and
    estimated, and the published figure the entry names; the stages that would run out of the profile's
    retries; and those whose estimate leaves their time limit no margin."""
    by_key: dict[str, list[PlannedJob]] = {}
    for job in sorted(jobs, key=lambda job: order.index(job.rule) if job.rule in order else len(order)):
        by_key.setdefault(job.compute_key, []).append(job)
    rows = [f"{'stage':<20} {'jobs':>5} {'GPUs/job':>8} {'runtime h':>9} {'estimate h':>10} {'submits':>7} "
            f"{'requested GPU-h':>15} {'estimated GPU-h':>15}"]
    problems, warnings, references, total_requested, total_estimated = [], [], [], 0.0, 0.0
    for key, group in by_key.items():
        job, settings = group[0], compute_settings(config, key)
        estimate = job_wall_hours(settings)
        submits = max(1, math.ceil(estimate / job.runtime_hours)) if estimate and job.runtime_hours else 1
        if submits > 1 + retries:
            problems.append(f"compute.{key}: estimated {estimate:.3g} h needs {submits} submissions of runtime "
                            f"{job.runtime_hours:g} h, more than the profile's 1 + {retries} retries: "
                            "raise runtime or retries")
        warning = time_limit_warning(key, estimate, job.runtime_hours, submits, retries)
        warnings += [warning] if warning else []
        requested = len(group) * job.gpus * job.runtime_hours * submits
        estimated = len(group) * job.gpus * estimate if estimate is not None else None
        total_requested += requested
        total_estimated += estimated or 0.0
        rows.append(f"{key:<20} {len(group):>5} {job.gpus:>8} {job.runtime_hours:>9.1f} "
                    f"{'-' if estimate is None else format(estimate, '.3g'):>10} {submits:>7} {requested:>15.1f} "
                    f"{'-' if estimated is None else format(estimated, '.1f'):>15}")
        if settings.get("reference"):
            references.append(f"{key}: {settings['reference']}")
    unestimated = [key for key in by_key if job_wall_hours(compute_settings(config, key)) is None]
    rows.append(f"{'total':<20} {len(jobs):>5} {'':>8} {'':>9} {'':>10} {'':>7} {total_requested:>15.1f} "
                f"{'-' if len(unestimated) == len(by_key) else format(total_estimated, '.1f'):>15}")
    if unestimated and len(unestimated) < len(by_key):
        rows.append(f"(no estimate for {', '.join(unestimated)}: set compute.<stage>.estimated_gpu_hours, or "
                    "estimated_hours for a job without GPUs)")
    rows += [f"published figure for {reference}" for reference in references]
    return rows, problems, warnings


def dag_edges(plan: SnakemakePlan) -> tuple[dict[int, str], list]:
    """The planned DAG (a `snakemake --d3dag` plan): job id -> rule, and (before, after) job id pairs."""
    dag = json.loads(plan.output())
    return {node["id"]: node["value"]["rule"] for node in dag["nodes"]}, [(e["u"], e["v"]) for e in dag["edges"]]


def topological_jobs(rules: dict[int, str], edges: list) -> tuple[list[int], dict[int, list[int]]]:
    """The jobs in an order where each comes after every job it waits for, and each job's followers."""
    after: dict[int, list[int]] = {job: [] for job in rules}
    waits_for = dict.fromkeys(rules, 0)
    for before, then in edges:
        after[before].append(then)
        waits_for[then] += 1
    ready, order = sorted(job for job, count in waits_for.items() if count == 0), []
    while ready:
        job = ready.pop(0)
        order.append(job)
        for then in after[job]:
            waits_for[then] -= 1
            if waits_for[then] == 0:
                ready.append(then)
    return order, after


def rule_order(rules: dict[int, str], edges: list) -> list[str]:
    """The rules in the order their last jobs can run (a topological order of the DAG): evaluation, which
    follows every model, comes after the training stages."""
    order, _ = topological_jobs(rules, edges)
    return list(dict.fromkeys(rules[job] for job in reversed(order)))[::-1]


def critical_path(rules: dict[int, str], edges: list, hours_of_rule: dict[str, float]) -> tuple[float, list[str]]:
    """The longest chain of expected wall times through the DAG (jobs of one rule in parallel count once):
    the least time the run takes with no queue wait, and the rules along it."""
    order, after = topological_jobs(rules, edges)
    finish = {job: (hours_of_rule.get(rules[job], 0.0), [rules[job]]) for job in order}
    for job in order:  # every job's predecessors are final before it passes its own finish on
        hours, path = finish[job]
        for then in after[job]:
            candidate = (hours + hours_of_rule.get(rules[then], 0.0), path + [rules[then]])
            if candidate[0] > finish[then][0]:
                finish[then] = candidate
    hours, path = max(finish.values(), key=lambda item: item[0], default=(0.0, []))
    return hours, [rule for rule in path if hours_of_rule.get(rule)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.preflight", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", type=Path, nargs="+", required=True,
                        help="The scale config (and any layered on it), as given to snakemake.")
    parser.add_argument("--profile", default="slurm",
                        help="The Snakemake profile: a name (your site profile, e.g. ~/.config/snakemake/slurm) or a "
                             "directory, as given to snakemake.")
    parser.add_argument("--target", nargs="+", default=["all"],
                        help="What to plan and price, as given to snakemake: r1_zero_branch, dev2, final, ... "
                             "(default: all).")
    args = parser.parse_args(argv)
    unknown = [target for target in args.target if target not in workflow_targets()]
    if unknown:
        raise SystemExit(f"preflight: no target {', '.join(unknown)} (the Snakefile's: "
                         f"{', '.join(workflow_targets())})")
    for path in args.configfile:
        if not path.is_file():
            choices = ", ".join(str(p.relative_to(REPO)) for p in sorted((REPO / "configs").glob("*.yaml"))
                                if p.name != "schema.yaml")
            raise SystemExit(f"preflight: no config file {path} (configs: {choices})")
    config = layered_config(args.configfile)
    profile_file = profile_file_of(args.profile)
    profile = yaml.safe_load(profile_file.read_text())
    launch = launch_command(args.configfile, args.profile, args.target)
    plan_args = (args.configfile, args.profile, args.target, uses_apptainer(profile) and not apptainer_available())
    job_plan, dag_plan = SnakemakePlan(*plan_args), SnakemakePlan(*plan_args, "--d3dag")  # while the checks run

    problems = profile_problems(profile_file, profile, launch_command(args.configfile, args.profile, args.target,
                                                                      "--sdm", "env-modules"))
    if uses_apptainer(profile):
        problems += image_problems(config)
    if not uses_apptainer(profile) or (apptainer_available() and not image_problems(config)):
        problems += sandbox_problems(config, profile)  # in the image, once there is one to run
    jobs = planned_jobs(job_plan.output())
    problems += partition_problems(jobs, slurm_partitions())

    dag = dag_edges(dag_plan)
    rows, retry_problems, warnings = gpu_hours_table(jobs, config, int(profile.get("retries", 0)), rule_order(*dag))
    problems += retry_problems
    reference = yaml.safe_load(args.configfile[0].read_text()) or {}  # the scale config, before what is layered on it
    warnings += batch_warnings(config, reference, str(args.configfile[0]), {job.compute_key for job in jobs})
    hours_of_rule = {job.rule: job_wall_hours(compute_settings(config, job.compute_key)) or 0.0 for job in jobs}
    hours, path = critical_path(*dag, hours_of_rule)
    print(f"preflight: {' '.join(args.target)} of {' + '.join(map(str, args.configfile))} with {profile_file}")
    print(f"GPU-hours: requested = jobs x GPUs x runtime x submits (what Slurm reserves); estimated = jobs x "
          f"compute.<stage>.estimated_gpu_hours (on {REFERENCE_GPU}) / gpu_speed; estimate h = one job's wall time")
    print("\n".join("  " + row for row in rows))
    print(f"critical path: {hours:.1f} h of estimated wall time ({' > '.join(path) or 'nothing estimated'}), "
          "queue waits aside")
    for warning in warnings:
        print(f"warning: {warning}")
    if problems:
        print(f"{len(problems)} thing(s) to fix before the first run:")
        print("\n".join(f"  - {problem}" for problem in problems))
        return 1
    print(f"nothing to fix; launch with: {launch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
