"""The real-scale configs: each passes the schema and plans its whole DAG offline, with the jobs,
GPUs and nodes it promises (nothing is downloaded: prepare_data and fetch_model are planned)."""

import json
import shlex
import sys

import pytest
import yaml

from stages.lib.config_checks import cross_field_errors, schema_errors
from stages.lib.recipe import stages_of_kind
from tests.snakemake_helpers import (
    REPO,
    apptainer_env,
    merged,
    planned_job_details,
    planned_jobs,
    snakemake,
    write_config,
)

REAL_CONFIGS = ["qwen2.5-1.5b", "qwen2.5-7b", "paper"]
MAIN_LINE = ["r1_zero", "cold_start_sft", "reasoning_rl", "rejection_sampling", "mixture_sft", "final_rl"]


def load(name):
    return yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text())


def plan(tmp_path, venv_env, config_path):
    """`snakemake -n --profile profiles/slurm`: the plan a user's cluster run starts from. The profile
    runs jobs in Apptainer images, and Snakemake asks for `apptainer --version` even in a dry run."""
    env = apptainer_env(dict(venv_env, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1"),
                        tmp_path / "apptainer-calls.jsonl")
    done = snakemake(tmp_path, config_path, "-n", "-p", "all", "--profile", str(REPO / "profiles" / "slurm"), env=env)
    return planned_jobs(done.stdout), planned_job_details(done.stdout)


def by_rule(details, rule):
    return [job for job in details if job["rule"] == rule]


@pytest.fixture(scope="module")
def plans(tmp_path_factory, venv_env):
    return {name: plan(tmp_path_factory.mktemp(name), venv_env, REPO / "configs" / f"{name}.yaml")
            for name in REAL_CONFIGS}


@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_every_real_config_plans_the_whole_dag(plans, name):
    config = load(name)
    jobs, details = plans[name]
    students, published = len(config["distill"]["students"]), len(config["evaluation"].get("published", {}))
    assert jobs["prepare_data"] == len(config["data"]["hub"]["sets"])  # a job per set
    assert "tiny_data" not in jobs and "base" not in jobs
    assert jobs["fetch_model"] == 1 + students + published  # the base, every student and published model, once
    assert jobs["generate"] == config["rejection_sampling"]["num_shards"]
    # the first shards' projection: the later shards wait for it (F9); it verifies the first shards
    first = config["rejection_sampling"]["projection_shards"]
    waiting = [int(job["wildcards"].removeprefix("shard=")) for job in by_rule(details, "generate")
               if any(path.endswith("/generate/projection.json") for path in job["input"])]
    assert sorted(waiting) == list(range(first, config["rejection_sampling"]["num_shards"]))
    (projection,) = by_rule(details, "rejection_projection")
    assert sum(path.endswith(".jsonl") for path in projection["input"]) == first
    assert jobs["evaluate"] == len(config["evaluation"]["models"]) + published
    assert published or name == "paper"  # a real config checks its evaluation against a published model
    assert all(jobs[rule] == 1 for rule in MAIN_LINE)
    for job in details:  # the profile's site defaults reach every job
        assert job["resources"].get("slurm_partition") == "gpu", job
    for job in details:  # only the login-node rules may reach the hub
        assert ("env -u HF_HUB_OFFLINE" in job["shell"]) == (job["rule"] in ("prepare_data", "fetch_model"))
    # tracking: each training stage is its own TensorBoard run under results/<run>/tensorboard/
    run = config["run_name"]
    for rule, stage in [("r1_zero", "r1_zero"), ("cold_start_sft", "cold_start_sft"), ("final_rl", "final_rl"),
                        ("reward_model", "reward_model_helpful")]:
        (shell,) = [job["shell"] for job in by_rule(details, rule) if f"/{stage} " in job["shell"]]
        assert (f"--report_to tensorboard --run_name {run}/{stage} "
                f"--tensorboard_dir results/{run}/tensorboard/{stage}") in shell, shell
        assert ("--log_completions false" in shell) == (rule in stages_of_kind("grpo"))


def test_one_node_config_gives_each_training_stage_a_node_of_eight_gpus(plans):
    _, details = plans["qwen2.5-1.5b"]
    for rule in MAIN_LINE[:3] + ["mixture_sft", "final_rl", "reward_model", "distill"]:
        for job in by_rule(details, rule):
            assert job["resources"]["gpu"] == "8" and job["resources"]["nodes"] == "1", (rule, job)
            assert "mpi" not in job["resources"]
            assert "stages.launch" in job["shell"] and "--gpus_per_node 8" in job["shell"]
    assert all(job["resources"]["gpu"] == "1" for job in by_rule(details, "generate"))
    assert all(job["resources"]["gpu"] == "1" for job in by_rule(details, "evaluate"))
    (job,) = by_rule(details, "rejection_sampling")
    assert "gpu" not in job["resources"] and job["resources"]["cpus_per_task"] == "32"


def test_multi_node_config_spreads_rl_over_three_nodes_with_a_vllm_server(plans):
    _, details = plans["qwen2.5-7b"]
    for rule in ("r1_zero", "reasoning_rl", "final_rl"):
        (job,) = by_rule(details, rule)
        assert job["resources"]["nodes"] == "3" and job["resources"]["gres"] == "gpu:8"
        assert job["resources"]["mpi"] == "srun" and job["resources"]["tasks"] == "3"
        assert "--nodes 3 --gpus_per_node 8" in job["shell"] and "--vllm_server_gpus 8" in job["shell"]
        assert "--vllm_server_tensor_parallel_size 1 --vllm_server_startup_s 1800" in job["shell"]
        assert "zero3.yaml" in job["shell"] and job["resources"]["cpus_per_task"] == "0"  # cpus_per_gpu rules
        # the launcher runs on the host with Snakemake's own interpreter (the job's PATH may have none), in place
        # of the job's shell (exec: Slurm's time-limit signal finds no shell to kill)
        assert job["shell"].startswith(f"exec {sys.executable} -m stages.launch "), job["shell"]
        # every task it starts goes into the GPU image with the profile's args
        assert f"--nv --bind /scratch {REPO}/containers/r1-gpu.sif'" in job["shell"], job["shell"]
    for rule in ("cold_start_sft", "mixture_sft"):
        (job,) = by_rule(details, rule)
        assert job["resources"]["nodes"] == "2" and job["resources"]["tasks"] == "2"


def test_paper_config_carries_per_student_learning_rates(plans):
    config = load("paper")
    _, details = plans["paper"]
    for job in by_rule(details, "distill"):
        student = job["wildcards"].removeprefix("student=")
        lr = config["distill"]["students"][student]["sft"]["learning_rate"]
        assert f"--learning_rate {lr}" in job["shell"], job["shell"]
    assert config["r1_zero"]["learning_rate"] == 3e-6 and config["final_rl"]["max_steps"] == 1700


def test_a_target_plans_and_requires_only_the_data_sets_it_reads(tmp_path, venv_env):
    """A set no source names is an error when a planned job reads it, naming the rule; Dev1 learning R1-Zero's
    samples reads no cold-start set, and no UltraChat or preference set is downloaded for it."""
    config = load("qwen2.5-1.5b")
    del config["data"]["hub"]["sets"]["cold_start"]
    done = snakemake(tmp_path, write_config(tmp_path, config), "-n", "all", env=venv_env, check=False)
    assert done.returncode != 0
    assert "data.hub.sets has no 'cold_start' (rule cold_start_sft reads it)" in done.stderr + done.stdout
    for name in ("general", "rl_general", "preferences_helpful", "preferences_harmless"):
        del config["data"]["hub"]["sets"][name]
    config["cold_start_data"] = dict(load("paper")["cold_start_data"], source="r1_zero")
    plan = snakemake(tmp_path, write_config(tmp_path, config), "-n", "-p", "dev1", env=venv_env).stdout
    prepared = {job["wildcards"] for job in planned_job_details(plan) if job["rule"] == "prepare_data"}
    assert prepared == {f"set={name}" for name in config["data"]["hub"]["sets"]}  # rl_prompts and the eval sets
    assert planned_jobs(plan)["cold_start_sft"] == 1


@pytest.mark.parametrize("override, named", [
    ({"compute": {"generate": {"nodes": 2}}}, ["compute.generate.nodes = 2"]),
    ({"compute": {"evaluate": {"vllm_server_gpus": 1, "gpu": 2}}}, ["compute.evaluate.vllm_server_gpus"]),
    ({"compute": {"r1_zero": {"accelerate_config": "configs/accelerate/zero4.yaml"}}},
     ["compute.r1_zero.accelerate_config: no file"]),
    ({"compute": {"r1_zero": {"gpu": 8, "nodes": 2, "vllm_server_gpus": 8}}, "r1_zero": {"questions_per_step": 3}},
     ["r1_zero.questions_per_step x num_generations = 48 completions per step do not split over 8 training "
      "process(es)"]),
    ({"data": {"hub": {"sets": {"eval_aime24": [{"path": "x", "feilds": {}}]}}}}, ["feilds"]),
    ({"compute": {"r1_zero": {"gpus": 8}}}, ["gpus", "compute"]),
    ({"base": {"name_or_path": "Qwen/Qwen2.5-7B", "sft": {"learning_rate": 1e-5}}}, ["base.sft"]),
    ({"rejection_sampling": {"judge": {"name_or_path": "Qwen/Qwen2.5-72B-Instruct", "domains": ["math"],
                                       "backend": "vllm", "vllm_tensor_parallel_size": 4}}},
     ["set compute.rejection_sampling.gpu to at least 4"]),
    ({"compute": {"r1_zero": {"gpus": 8}}}, ["compute.r1_zero.gpus: unknown key; did you mean 'gpu'?"]),
    # a path that is not there is a mistake, not a hub id to download (the hub client's error is 86 lines)
    ({"base": {"name_or_path": "/models/Qwen2.5-Math-1.5B"}},
     ["base.name_or_path: /models/Qwen2.5-Math-1.5B is not a directory; a local model is a directory"]),
    ({"distill": {"students": {"small": {"name_or_path": "./mine"}}}},
     ["distill.students.small.name_or_path: ./mine is not a directory"]),
])
def test_real_config_mistakes_are_named(tmp_path, venv_env, override, named):
    config = merged(load("qwen2.5-1.5b"), override)
    done = snakemake(tmp_path, write_config(tmp_path, config), "-n", "all", env=venv_env, check=False)
    assert done.returncode != 0
    for text in named:
        assert text in done.stdout + done.stderr, done.stdout + done.stderr



def test_a_nested_config_on_the_command_line_is_told_to_layer_a_file(tmp_path, venv_env):
    """`--config reasoning_rl={max_steps: 10}` reaches the workflow as the string '10': the error says what to
    do instead of asking to write 10 (which was written), and names --config as a source."""
    done = snakemake(tmp_path, None, "-n", "all", "--config", "reasoning_rl={max_steps: 10}", env=venv_env,
                     check=False)
    output = done.stdout + done.stderr
    problems = [line for line in output.splitlines() if line.startswith("  ")]
    assert done.returncode != 0
    assert "invalid config (configs/tiny.yaml + --config):" in output, output
    assert problems[0] == ("  --config reasoning_rl={...}: --config sets top-level keys only (it reads nested values "
                           "as strings); write them in a YAML file and layer it: --configfile configs/tiny.yaml "
                           "yours.yaml"), output
    assert "is a string to YAML" not in output
    # a nested string is read right, and stays allowed (the README's start_from example)
    done = snakemake(tmp_path, None, "-n", "all", "--config", f"start_from={{reasoning_rl: {tmp_path}}}",
                     env=venv_env, check=False)
    output = done.stdout + done.stderr
    assert "--config sets top-level keys only" not in output and "start_from.reasoning_rl" in output, output


def test_a_config_written_before_the_renames_names_each_new_key(tmp_path, venv_env):
    """Stages have one name each since 2026-12-04: an older config is told what to rename."""
    config = load("qwen2.5-1.5b")
    for old, new in [("base_model", "base"), ("reward_models", "reward_model"), ("distillation", "distill")]:
        config[old] = config.pop(new)
    config["start_from"] = {"mixture": str(tmp_path)}
    done = snakemake(tmp_path, write_config(tmp_path, config), "-n", "all", env=venv_env, check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    for old, new in [("base_model", "base"), ("reward_models", "reward_model"), ("distillation", "distill"),
                     ("start_from.mixture", "start_from.rejection_sampling")]:
        assert f"{old}: renamed to {new} " in output, output
    assert "unknown key" not in output and "missing (required" not in output

def test_a_gpu_count_that_does_not_split_a_step_is_told_the_counts_that_do():
    """512 completions over 3 processes x 8 micro-batches: the nearest counts that split them (adapter-review-4)."""
    config = merged(load("qwen2.5-1.5b"), {"compute": {"r1_zero": {"gpu": 3}}})
    assert "r1_zero.questions_per_step x num_generations = 512 completions per step do not split over 3 training " \
           "process(es) x gradient_accumulation_steps = 8 micro-batches: 2 or 4 training processes do" \
           in cross_field_errors(config)
    # 48 completions: 8 processes split them with gradient_accumulation_steps 6, 6 processes with 8
    config = merged(load("qwen2.5-1.5b"), {"r1_zero": {"questions_per_step": 3}})
    assert any(error.endswith("micro-batches: 6 training processes do, or gradient_accumulation_steps 6 does")
               for error in cross_field_errors(config))


def test_a_stage_s_own_cpu_setting_replaces_the_default_s_either_way():
    from stages.lib.settings import compute_settings

    config = {"compute": {"default": {"cpus_per_task": 8, "mem_mb": 100}, "r1_zero": {"gpu": 8, "cpus_per_gpu": 12},
                          "evaluate": {"mem_mb": 50}}}
    assert compute_settings(config, "r1_zero") == {"mem_mb": 100, "gpu": 8, "cpus_per_gpu": 12}
    assert compute_settings(config, "evaluate") == {"cpus_per_task": 8, "mem_mb": 50}
    flipped = {"compute": {"default": {"cpus_per_gpu": 12}, "rejection_sampling": {"cpus_per_task": 32}}}
    assert compute_settings(flipped, "rejection_sampling") == {"cpus_per_task": 32}
    assert compute_settings({}, "final_rl") == {}


def test_a_published_model_is_fetched_evaluated_and_reported_beside_its_authors_figures(tmp_path, venv_env):
    """`snakemake published` evaluates the config's published models with the evaluation job the pipeline's own
    models get (settings, sets, k per set), before any training; the report takes their reported figures."""
    config = load("qwen2.5-1.5b")
    env = apptainer_env(dict(venv_env, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1"), tmp_path / "calls.jsonl")
    done = snakemake(tmp_path, write_config(tmp_path, config), "-n", "-p", "published", "--profile",
                     str(REPO / "profiles" / "slurm"), env=env)
    jobs, details = planned_jobs(done.stdout), planned_job_details(done.stdout)
    # the evaluation sets alone are prepared: no training set is downloaded for it
    assert jobs == {"prepare_data": len(config["evaluation"]["sets"]), "fetch_model": 1, "evaluate": 1,
                    "published": 1}, jobs
    (fetch,) = by_rule(details, "fetch_model")
    assert "--name_or_path deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" in fetch["shell"]
    (evaluation,) = by_rule(details, "evaluate")
    assert "--model_path results/qwen2.5-1.5b/published_r1distill15b --template chat" in evaluation["shell"]
    assert """--samples_per_set '{"aime24": 64, "gpqa": 64}'""" in evaluation["shell"]
    report = snakemake(tmp_path, write_config(tmp_path, config), "-n", "-p", "report", env=env).stdout
    assert '"reported": {"aime24": 28.9, "math500": 83.9, "gpqa": 33.8}' in report
    config["evaluation"]["published"]["r1distill15b"]["reported"]["aime25"] = 20.0
    done = snakemake(tmp_path, write_config(tmp_path, config), "-n", "all", env=env, check=False)
    assert "evaluation.published.r1distill15b.reported.aime25: no such set in evaluation.sets" in done.stdout


def test_hub_revisions_pin_every_source_and_model_naming_their_ids(tmp_path, venv_env):
    """One map pins a hub id wherever it is named (stages/lib/hub.py); a `revision:` written beside an id wins."""
    base, openr1 = "a" * 40, "b" * 40
    config = merged(load("qwen2.5-1.5b"), {"hub_revisions": {"Qwen/Qwen2.5-Math-1.5B": base,
                                                             "open-r1/OpenR1-Math-220k": openr1}})
    config["data"]["hub"]["sets"]["cold_start"][0]["revision"] = "v1"
    _, details = plan(tmp_path, venv_env, write_config(tmp_path, config))
    fetched = {job["shell"].split("--name_or_path ")[1].split()[0]: job["shell"]
               for job in by_rule(details, "fetch_model")}
    assert f"--revision '{base}'" in fetched["Qwen/Qwen2.5-Math-1.5B"]
    assert "--revision ''" in fetched["deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"]  # not pinned: the main branch
    sources = {stem: items for job in by_rule(details, "prepare_data")  # a job per set
               for stem, items in json.loads(shlex.split(job["shell"].split("--sources ", 1)[1])[0]).items()}
    assert [s.get("revision") for s in sources["rl_prompts"] if s["path"] == "open-r1/OpenR1-Math-220k"] == [openr1]
    assert [s.get("revision") for s in sources["cold_start"]] == ["v1"]


def test_trl_s_choices_are_the_installed_trl_s():
    """loss_type (and scale_rewards, importance_sampling_level, an SFT section's lr_scheduler_type) take what the
    installed TRL takes, read from TRL itself: TRL 1.16's newer losses pass, a typo is named with TRL's list."""
    from stages.lib.configs import GRPOStageConfig, SFTStageConfig, default_of, trl_choices

    for config_class in (GRPOStageConfig, SFTStageConfig):  # the check takes a stage default without asking TRL
        for name in config_class.TRL_CHOICES:
            assert default_of(config_class, name) in trl_choices(config_class, name), name
    for loss in ("cispo", "sapo", "vespo"):
        config = merged(load("tiny"), {"r1_zero": {"loss_type": loss, "epsilon_high": 5.0}})
        assert not schema_errors(config) and not cross_field_errors(config), loss
    config = merged(load("tiny"), {"cold_start_sft": {"lr_scheduler_type": "warmup_stable_decay"},
                                   "reasoning_rl": {"scale_rewards": "none", "importance_sampling_level": "sequence"}})
    assert not schema_errors(config) and not cross_field_errors(config)
    config = merged(load("tiny"), {"r1_zero": {"loss_type": "cispoo", "trainer_args": {"loss_type": "cispo"}}})
    errors = cross_field_errors(config)
    assert any(line.startswith("r1_zero.loss_type: 'cispoo' is not one of the installed TRL's ['")
               and "'cispo'" in line and line.endswith("did you mean 'cispo'?") for line in errors), errors
    assert "r1_zero.trainer_args.loss_type: the stage has its own key for it: set r1_zero.loss_type instead" in errors


def test_cispo_reaches_trl(tmp_path):
    """A config's `loss_type: cispo` passes the checks and, as the rule's flags, becomes TRL's GRPOConfig."""
    from stages.grpo import trainer_arguments
    from stages.lib.cli import parse_config
    from stages.lib.configs import GRPOStageConfig

    section = {"loss_type": "cispo", "epsilon_high": 5.0, "questions_per_step": 2, "num_generations": 2}
    config = merged(load("tiny"), {"r1_zero": section})
    assert not schema_errors(config) and not cross_field_errors(config)
    flags = [word for key, value in section.items() for word in (f"--{key}", str(value))]
    stage = parse_config(GRPOStageConfig, ["--model_path", "m", "--train_data", "d", "--output_dir", str(tmp_path),
                                           *flags])
    args = trainer_arguments(stage, world_size=1, vllm_stop={})
    assert (args.loss_type, args.epsilon_high) == ("cispo", 5.0)


def test_trainer_args_values_are_checked_by_building_trl_s_config():
    """A trainer_args value TRL refuses is named with the key and TRL's reason, in one line, before any job."""
    def errors(section: str, trainer_args: dict) -> list[str]:
        return cross_field_errors(merged(load("tiny"), {section: {"trainer_args": trainer_args}}))

    assert errors("r1_zero", {"top_k": "twenty"}) == [
        "r1_zero.trainer_args.top_k: 'twenty' is not int (TRL's GRPOConfig.top_k)"]
    (line,) = errors("r1_zero", {"lr_scheduler_type": "cosin", "max_grad_norm": 0.5})
    assert line.startswith("r1_zero.trainer_args.lr_scheduler_type: TRL's GRPOConfig refuses it: cosin is not a "
                           "valid SchedulerType, please select one of ['linear'"), line
    assert cross_field_errors(merged(load("tiny"), {"reward_model": {"helpful": {"trainer_args": {
        "save_strategy": "sometimes"}}}})) == ["reward_model.helpful.trainer_args.save_strategy: TRL's RewardConfig "
                                               "refuses it: sometimes is not a valid SaveStrategy, please select one "
                                               "of ['no', 'steps', 'epoch', 'best']"]
    assert errors("r1_zero", {"vllm_importance_sampling_clip_min": 2.0, "vllm_importance_sampling_clip_max": 1.0}) \
        == ["r1_zero.trainer_args: TRL's GRPOConfig refuses them together: vllm_importance_sampling_clip_min (2.0) "
            "must be less than vllm_importance_sampling_clip_max (1.0)."]
    assert errors("r1_zero", {"top_k": 20, "max_grad_norm": 0.5, "top_entropy_quantile": 0.2, "tf32": True}) == []


def test_what_would_fail_in_the_job_is_refused_when_planned():
    """vLLM on a stage without GPUs, a tracker whose package is missing, a clip range upside down: one line each,
    with the fix, before any job (they used to fail in the job)."""
    import importlib.util

    config = merged(load("tiny"), {"r1_zero": {"use_vllm": True, "epsilon_high": 0.1},
                                   "tracking": {"report_to": ["tensorboard", "wandb", "trackio"]}})
    assert not importlib.util.find_spec("wandb") and not importlib.util.find_spec("trackio")  # in no lock
    assert not schema_errors(config)
    assert cross_field_errors(config) == [
        "r1_zero.epsilon_high = 0.1 is below r1_zero.epsilon = 0.2: the upper clip range is at least the lower one "
        "(DAPO: 0.28 over 0.2); 0 makes it the same",
        "r1_zero.use_vllm: vLLM generates on GPUs, and compute.r1_zero gives the stage none: set compute.r1_zero.gpu, "
        "or use_vllm: false",
        "tracking.report_to: wandb needs the wandb package, which this environment lacks (the jobs would fail): use "
        "tensorboard, or add wandb to the locks (containers/lock.py says how)",
        "tracking.report_to: trackio needs the trackio package, which this environment lacks (the jobs would fail): "
        "use tensorboard, or add trackio to the locks (containers/lock.py says how)"]
    config = merged(load("tiny"), {"r1_zero": {"use_vllm": True, "epsilon_high": 0.28},
                                   "compute": {"r1_zero": {"gpu": 1}}, "tracking": {"report_to": ["tensorboard"]}})
    assert not cross_field_errors(config)


def test_a_layered_null_removes_a_key_and_a_one_of_says_choose_one(tmp_path):
    """`base: {build: null, name_or_path: ...}` in a file layered on tiny.yaml switches the base to a model of
    one's own; without the null the check says to choose one, in one line. A null in trainer_args is TRL's."""
    from stages.lib.settings import layered_config

    model = tmp_path / "my-model"
    model.mkdir()
    overlay = tmp_path / "mine.yaml"
    overlay.write_text(yaml.safe_dump({"base": {"build": None, "name_or_path": str(model)},
                                       "r1_zero": {"trainer_args": {"generation_batch_size": None}}}))
    config = layered_config([REPO / "configs" / "tiny.yaml", overlay])
    assert config["base"] == {"name_or_path": str(model)}
    assert config["r1_zero"]["trainer_args"] == {"generation_batch_size": None}
    assert not schema_errors(config)
    both = merged(load("tiny"), {"base": {"name_or_path": str(model)}})
    assert schema_errors(both) == ["base: sets build and name_or_path: choose one (a file layered on another removes "
                                   "a key with null: base: {build: null})"]
    del both["base"]["build"], both["base"]["name_or_path"]
    assert schema_errors(both) == ["base: set one of build, name_or_path"]

def test_a_local_data_source_must_be_there_and_of_a_type_it_can_be_read_as(tmp_path):
    from stages.lib.config_checks import data_errors

    (tmp_path / "prompts.txt").write_text("What is 1 + 1?\n")
    config = load("qwen2.5-1.5b")
    config["data"]["hub"]["sets"]["rl_prompts"] = [{"path": str(tmp_path / "prompts.txt")},
                                                   {"path": str(tmp_path / "mine.jsonl")}]
    assert data_errors(config) == [
        f"data.hub.sets.rl_prompts[0].path: {tmp_path / 'prompts.txt'}: unknown file type '.txt'; a local source is "
        "a .jsonl, .json, .csv or .parquet file, or a directory of them",
        f"data.hub.sets.rl_prompts[1].path: {tmp_path / 'mine.jsonl'}: no such file or directory"]
    assert data_errors(load("qwen2.5-1.5b")) == []  # hub ids


def test_fetch_downloads_everything_and_an_offline_controller_says_so_before_any_job(tmp_path, venv_env):
    """F8: `snakemake fetch` on the login node plans every hub download and nothing else; a controller in a Slurm
    job whose node cannot reach the hub, with a download missing, stops in one line before any job starts (it
    used to start other branches' GPU jobs and fail the download when its turn came)."""
    config = load("qwen2.5-1.5b")
    config_path = write_config(tmp_path, config)
    fetch = planned_jobs(snakemake(tmp_path, config_path, "-n", "fetch", env=venv_env).stdout)
    students, published = len(config["distill"]["students"]), len(config["evaluation"].get("published", {}))
    assert fetch == {"fetch_model": 1 + students + published, "prepare_data": len(config["data"]["hub"]["sets"]),
                     "fetch": 1}
    offline = dict(venv_env, SLURM_JOB_ID="4242", HF_ENDPOINT="http://127.0.0.1:9")  # a closed port: no hub
    done = snakemake(tmp_path, config_path, "-n", "all", env=offline, check=False)
    assert done.returncode != 0 and "hub download(s) not fetched yet (results/qwen2.5-1.5b/base, ...), and this " \
        "node (Slurm job 4242) cannot reach the hub: run the same command with the target `fetch` on the login " \
        "node first" in done.stdout + done.stderr
