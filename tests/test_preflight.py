"""The preflight a user runs before the first cluster run (`make preflight CONFIG=...`): the shipped
profile's site placeholders are flagged, and every real config's plan is priced in GPU-hours."""

import math
import re
import shutil
from pathlib import Path

import pytest
import yaml

from stages import preflight
from stages.lib.settings import deep_update
from tests.snakemake_helpers import FAKE_APPTAINER_DIR, REPO

REAL_CONFIGS = ["qwen2.5-1.5b", "qwen2.5-7b", "paper"]
# `sinfo --noheader --format=%R|%G|%m|%c|%l` of a site with 8-GPU nodes (two node types) and a debug partition
SINFO = """gpu|gpu:h100:8(S:0-1)|1000000|96|2-00:00:00
gpu|gpu:a100:4(S:0)|512000+|64|2-00:00:00
debug|(null)|256000|64|30:00
"""
PROFILE = REPO / "profiles" / "slurm"


def table(output: str) -> dict[str, list[str]]:
    """The GPU-hours table: stage -> its columns."""
    rows = {}
    for line in output.splitlines():
        words = line.split()
        if line.startswith("  ") and (len(words) == 8 or words[:1] == ["total"]) and words[0] != "stage":
            rows[words[0]] = words[1:]
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_the_shipped_profile_is_flagged_and_each_real_config_is_priced(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # an empty directory: the whole DAG is planned
    monkeypatch.setattr(preflight, "apptainer_available", lambda: False)
    monkeypatch.setattr(preflight, "slurm_partitions", lambda: None)
    status = preflight.main(["--configfile", str(REPO / "configs" / f"{name}.yaml"), "--profile", str(PROFILE)])
    output = capsys.readouterr().out
    assert status == 1
    problems = output.split("thing(s) to fix before the first run:")[1]
    assert "default-resources.slurm_account is still the placeholder 'my_project'" in problems
    assert "apptainer is not on PATH" in problems and "--sdm env-modules" in problems
    assert ("binds /scratch" in problems) == (not Path("/scratch").exists())

    config = yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text())
    rows = table(output)
    for stage in ("r1_zero", "cold_start_sft", "reasoning_rl", "mixture_sft", "final_rl", "reward_model", "generate",
                  "evaluate"):
        jobs, gpus, runtime_h, estimate_h, submits, requested, estimated = rows[stage]
        settings = {**config["compute"].get("default", {}), **config["compute"][stage]}
        assert int(gpus) == settings["gpu"] * settings.get("nodes", 1)
        assert float(runtime_h) == pytest.approx(settings["runtime"] / 60, abs=0.05)
        assert float(requested) == pytest.approx(int(jobs) * int(gpus) * float(runtime_h) * int(submits), rel=0.01)
        if name == "paper":
            assert estimate_h == estimated == "-"  # the paper's config documents the recipe; it is not priced
            continue
        # the real configs are priced, and their time limits sized from the estimate: at most twice it in whole
        # hours (2 h at least), and a job longer than Slurm's 48 h limit resumes within the profile's retries
        estimate = float(estimate_h)
        assert float(estimated) == pytest.approx(int(jobs) * int(gpus) * estimate, rel=0.01)
        assert estimate <= float(runtime_h) * int(submits) and \
            float(runtime_h) <= min(max(2, math.ceil(2 * estimate)), 48)
        assert int(submits) == max(1, -(-estimate // float(runtime_h)))
    totals = rows["total"]
    assert float(totals[-2]) == pytest.approx(sum(float(r[-2]) for s, r in rows.items() if s != "total"), rel=0.01)
    assert "prepare_data" not in rows and "report" not in rows  # login-node rules reserve nothing


@pytest.fixture
def site_ready(container_rootfs, tmp_path, monkeypatch) -> list[str]:
    """Site values in the profile, apptainer on PATH (the stand-in), images in place (the CPU image's
    root filesystem for both), a partition Slurm knows: preflight's arguments."""
    profile_dir = tmp_path / "profile"
    profile_dir.mkdir()
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    profile["default-resources"] = dict(profile["default-resources"], slurm_account="rl-lab")
    profile["apptainer-args"] = f"--nv --bind {tmp_path}"
    (profile_dir / "config.yaml").write_text(yaml.safe_dump(profile))
    layered = tmp_path / "site.yaml"
    layered.write_text(yaml.safe_dump({"containers": {"cpu": str(container_rootfs), "gpu": str(container_rootfs)}}))
    monkeypatch.setenv("PATH", f"{FAKE_APPTAINER_DIR}:{Path(preflight.sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setenv("R1_FAKE_APPTAINER_LOG", str(tmp_path / "apptainer-calls.jsonl"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(preflight, "slurm_partitions", lambda: preflight.parse_sinfo(SINFO))
    return ["--configfile", str(REPO / "configs" / "qwen2.5-1.5b.yaml"), str(layered), "--profile", str(profile_dir)]


def test_a_site_ready_profile_passes(site_ready, tmp_path, monkeypatch, capsys):
    argv = site_ready
    assert preflight.main(argv) == 0, capsys.readouterr().out
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last == f"nothing to fix; launch with: snakemake all --profile {argv[-1]} --configfile {argv[1]} {argv[2]}"
    # the code sandbox was tried in the GPU image (the 1.5B config rewards and evaluates code)
    calls = (tmp_path / "apptainer-calls.jsonl").read_text()
    assert '"bwrap", "--unshare-all"' in calls

    # the same site whose cluster has no partition of that name
    batch_only = preflight.parse_sinfo("batch|gpu:8|1000000|96|2-00:00:00")
    monkeypatch.setattr(preflight, "slurm_partitions", lambda: batch_only)
    assert preflight.main(argv) == 1
    assert "partition 'gpu' is not one sinfo lists (batch)" in capsys.readouterr().out


def test_a_sandbox_the_image_refuses_is_flagged_before_anything_is_submitted(site_ready, monkeypatch, capsys):
    """Many sites refuse unprivileged user namespaces inside Apptainer: every job that runs model code
    would stop (gpu-path-audit-3, N2). Here the probe in the image fails as bwrap fails there."""
    refusal = ["sh", "-c", "echo 'bwrap: No permissions to create new namespace' >&2; exit 1"]
    monkeypatch.setattr(preflight, "isolation_probe", lambda: refusal)
    assert preflight.main(site_ready) == 1
    output = capsys.readouterr().out
    assert "the code sandbox (bubblewrap) cannot run here: bwrap: No permissions to create new namespace" in output
    assert "srun --pty apptainer exec --nv --bind" in output


def test_a_missing_config_file_is_one_line_with_the_choices(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit) as stop:
        preflight.main(["--configfile", "configs/qwen2.5-1.5B.yaml"])
    assert str(stop.value).count("\n") == 0
    assert re.search(r"no config file configs/qwen2\.5-1\.5B\.yaml \(configs: .*configs/qwen2\.5-1\.5b\.yaml",
                     str(stop.value))


def test_login_node_rules_are_the_rules_marked_local():
    """The preflight leaves out the jobs Snakemake runs on the login node: the same rules as `localrule: True`."""
    local = set()
    for path in (REPO / "rules").glob("*.smk"):
        for block in re.split(r"\n(?=\s*rule \w+:)", path.read_text()):
            match = re.search(r"rule (\w+):", block)
            if match and "localrule: True" in block:
                local.add(match.group(1))
    assert local | {"all"} == set(preflight.LOGIN_NODE_RULES)


def test_bind_paths_reads_every_form_apptainer_takes():
    assert preflight.bind_paths("--nv --bind /scratch,/data:/mnt/data:ro -B /work --bind=/opt") == [
        "/scratch", "/data", "/work", "/opt"]


def test_a_profile_is_found_by_name_as_snakemake_finds_it(tmp_path, monkeypatch):
    """`--profile slurm` is the site profile in Snakemake's config directory; none there names the fix."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=r"no Snakemake profile 'slurm' .*`make site-profile` copies the template"):
        preflight.profile_file_of("slurm")
    shutil.copytree(PROFILE, tmp_path / "snakemake" / "slurm")
    assert preflight.profile_file_of("slurm") == tmp_path / "snakemake" / "slurm" / "config.yaml"
    assert preflight.profile_file_of(str(PROFILE)) == PROFILE / "config.yaml"


def preflight_table(tmp_path, monkeypatch, capsys, *layered: dict, target: str = "all") -> tuple[dict, str]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(preflight, "apptainer_available", lambda: False)
    monkeypatch.setattr(preflight, "slurm_partitions", lambda: None)
    files = [str(REPO / "configs" / "qwen2.5-1.5b.yaml")]
    for number, layer in enumerate(layered):
        (tmp_path / f"site{number}.yaml").write_text(yaml.safe_dump(layer))
        files.append(str(tmp_path / f"site{number}.yaml"))
    preflight.main(["--configfile", *files, "--profile", str(PROFILE), "--target", target])
    output = capsys.readouterr().out
    return table(output), output


@pytest.mark.slow
def test_estimates_are_work_so_a_stages_wall_time_follows_its_gpus_and_their_speed(tmp_path, monkeypatch, capsys):
    """4 GPUs instead of 8 double R1-Zero's hours and keep its GPU-hours; GPUs half as fast double both."""
    rows, output = preflight_table(tmp_path, monkeypatch, capsys)
    assert rows["r1_zero"][1:4] == ["8", "5.0", "2.5"] and rows["r1_zero"][-1] == "20.0"
    assert "warning:" not in output  # the shipped estimates leave their time limits a margin
    # the R1-Zero branch alone (adapter-review-4: an R1-Zero-only plan priced the whole DAG), on 4 GPUs: its
    # estimate fills its time limit, and each GPU takes twice the completions per micro-step
    layer = {"compute": {"r1_zero": {"gpu": 4}, "reasoning_rl": {"gpu": 4}}}
    rows, branch = preflight_table(tmp_path, monkeypatch, capsys, layer, target="r1_zero_branch")
    assert rows["r1_zero"][1:4] == ["4", "5.0", "5"] and rows["r1_zero"][-1] == "20.0"
    assert set(rows) == {"r1_zero", "evaluate", "total"} and rows["total"][0] == "3", branch  # base and R1-Zero's
    assert "warning: compute.r1_zero: estimated 5 h fills 100% of runtime 5 h x 1 submission(s)" in branch
    assert "r1_zero.gradient_accumulation_steps: 16 keeps 8" in branch
    assert "reasoning_rl" not in branch  # on 4 GPUs as well, but not in the plan
    assert f"snakemake r1_zero_branch --profile {PROFILE} --sdm env-modules --configfile" in branch  # the hint
    rows, _ = preflight_table(tmp_path, monkeypatch, capsys, {"compute": {"default": {"gpu_speed": 0.5}}})
    assert rows["r1_zero"][3:5] == ["5", "1"] and rows["r1_zero"][-1] == "40.0"
    assert rows["evaluate"][3] == "0.6"  # every GPU stage, through compute.default
    # the published figure the config names, beside the estimate
    assert "published figure for r1_zero: DeepScaleR-1.5B-Preview" in output


@pytest.mark.slow
def test_the_critical_path_is_the_longest_chain_of_wall_times(tmp_path, monkeypatch, capsys):
    _, output = preflight_table(tmp_path, monkeypatch, capsys)
    config = yaml.safe_load((REPO / "configs" / "qwen2.5-1.5b.yaml").read_text())["compute"]
    # the later generation shards wait for the first shards' projection, which takes rejection sampling's resources
    main_line = ["cold_start_sft", "reasoning_rl", "generate", "rejection_projection", "generate",
                 "rejection_sampling", "mixture_sft", "final_rl", "evaluate"]
    hours = sum(preflight.job_wall_hours({**config["default"], **config[preflight.COMPUTE_KEY_OF_RULE.get(key, key)]})
                for key in main_line)
    assert f"critical path: {hours:.1f} h of estimated wall time ({' > '.join(main_line)}), queue waits aside" \
        in output, output


def test_an_unknown_target_is_one_line_naming_the_targets(monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit) as stop:
        preflight.main(["--configfile", "configs/qwen2.5-1.5b.yaml", "--target", "r1_zero_branch", "r1zero"])
    assert str(stop.value) == ("preflight: no target r1zero (the Snakefile's: all, fetch, r1_zero_branch, dev1, dev2, "
                               "dev3, published, final, r1, distilled)")


def test_the_plans_and_the_launch_line_are_the_targets(monkeypatch):
    started = []
    monkeypatch.setattr(preflight.subprocess, "Popen", lambda command, **options: started.append(command))
    preflight.SnakemakePlan([Path("c.yaml")], "slurm", ["dev2", "final"], False, "--d3dag")
    assert started[0][3:9] == ["--d3dag", "dev2", "final", "--profile", "slurm", "-s"]
    assert preflight.launch_command([Path("c.yaml")], "slurm", ["dev2", "final"]) == \
        "snakemake dev2 final --profile slurm --configfile c.yaml"


def test_an_estimate_within_a_tenth_of_its_time_limit_is_warned_with_the_ways_out():
    """Preflight plans a job past its runtime as resubmissions (submits); an estimate that fills what they hold
    leaves nothing for the save lead or a slower node: one more submission, unplanned."""
    assert preflight.time_limit_warning("r1_zero", 5.0, 5.0, 1, 2) == (
        "compute.r1_zero: estimated 5 h fills 100% of runtime 5 h x 1 submission(s) (over 90% leaves no room for "
        "the save lead or a slower node): raise runtime to 360 (6 h), give the stage more GPUs, or accept one more "
        "submission (the profile's retries: 2 allow it)")
    assert preflight.time_limit_warning("r1_zero", 4.5, 5.0, 1, 2) is not None  # at the margin
    assert preflight.time_limit_warning("r1_zero", 4.4, 5.0, 1, 2) is None
    assert preflight.time_limit_warning("r1_zero", 12.0, 5.0, 3, 2) is None  # 80% of what 3 submissions hold
    warning = preflight.time_limit_warning("reasoning_rl", 14.0, 5.0, 3, 2)  # 93%: a 4th, past the 2 retries
    assert "fills 93% of runtime 5 h x 3 submission(s)" in warning and "raise runtime to 360 (6 h)" in warning
    assert warning.endswith("(raise the profile's retries to 3)")
    assert preflight.time_limit_warning("evaluate", None, 5.0, 1, 2) is None  # nothing estimated


def test_a_changed_gpu_count_shows_the_batch_it_changes_and_the_accumulation_that_keeps_it():
    """GRPO's step is a fixed number of completions: half the GPUs, twice the completions per GPU per micro-step
    (activation memory) unless gradient_accumulation_steps doubles. SFT's micro-batch is its own key: the global
    batch changes instead."""
    shipped = yaml.safe_load((REPO / "configs" / "qwen2.5-1.5b.yaml").read_text())
    planned = {"r1_zero", "cold_start_sft", "evaluate"}
    config = deep_update(shipped, {"compute": {"r1_zero": {"gpu": 4}, "cold_start_sft": {"gpu": 4},
                                                         "final_rl": {"gpu": 4}}})
    assert preflight.batch_warnings(config, shipped, "shipped.yaml", planned) == [
        "r1_zero: 16 completions per GPU per micro-step (512 over 4 training processes x gradient_accumulation_steps "
        "8), 8 on the 8 training processes of shipped.yaml: r1_zero.gradient_accumulation_steps: 16 keeps 8",
        "cold_start_sft: global batch 32 (2 examples per GPU per micro-step x 4 GPUs x gradient_accumulation_steps "
        "4), 64 on the 8 GPUs of shipped.yaml: cold_start_sft.gradient_accumulation_steps: 8 keeps 64"]
    # followed: nothing to say; and the reward models, one section per kind
    kept = deep_update(config, {"r1_zero": {"gradient_accumulation_steps": 16},
                                          "cold_start_sft": {"gradient_accumulation_steps": 8},
                                          "compute": {"reward_model": {"gpu": 16}}})
    assert [warning.split(":")[0] for warning in preflight.batch_warnings(kept, shipped, "shipped.yaml", {
        "r1_zero", "cold_start_sft", "reward_model"})] == ["reward_model.helpful", "reward_model.harmless"]
    # 128 GPUs at gradient_accumulation_steps 1: 4 completions each, and no accumulation keeps 8 (512 / 128 / 8 < 1)
    wide = deep_update(shipped, {"compute": {"r1_zero": {"gpu": 8, "nodes": 16}},
                                           "r1_zero": {"gradient_accumulation_steps": 1}})
    assert preflight.batch_warnings(wide, shipped, "shipped.yaml", {"r1_zero"})[0].endswith(
        "no gradient_accumulation_steps keeps 8 on 128")


def test_each_job_is_held_against_what_its_partition_s_nodes_offer():
    limits = preflight.parse_sinfo(SINFO)
    assert limits["gpu"] == preflight.PartitionLimits(gpus_per_node=8, mem_mb=1000000, cpus=96, time_limit_min=2880)
    assert limits["debug"].gpus_per_node == 0 and limits["debug"].time_limit_min == 30
    job = preflight.PlannedJob("r1_zero", {"slurm_partition": "gpu", "gpu": "8", "cpus_per_gpu": "12",
                                           "cpus_per_task": "0", "mem_mb": "900000", "runtime": "1200"})
    assert preflight.partition_problems([job], limits) == []
    small = preflight.parse_sinfo("gpu|gpu:4|512000|48|0-12:00:00")
    assert preflight.partition_problems([job], small) == [
        "compute.r1_zero: 8 GPUs per node on partition 'gpu', whose nodes have 4: lower gpu",
        "compute.r1_zero: 900000 memory (MB) on partition 'gpu', whose nodes have 512000: lower mem_mb",
        "compute.r1_zero: 96 CPUs per node on partition 'gpu', whose nodes have 48: lower cpus_per_gpu or "
        "cpus_per_task",
        "compute.r1_zero: runtime 1200 min is over partition 'gpu''s limit of 720 min: lower runtime (the job "
        "resumes in the profile's retries)"]
    assert preflight.sinfo_minutes("infinite") == float("inf") and preflight.sinfo_minutes("30:00") == 30
    assert preflight.sinfo_minutes("2-12:00:00") == 3600 and preflight.sinfo_minutes("45") == 45
