"""stages.launch: the command lines a training stage gets on real node lists, and task supervision."""

import os
import signal
import sys
import time

import pytest

from stages.launch import LaunchConfig, Task, local_argv, plan, run, srun_argv
from tests.conftest import SMALL_DATA

STAGE = ["--model_path", "results/q/cold_start_sft", "--max_steps", "500"]
ZERO3 = "configs/accelerate/zero3.yaml"


def test_one_gpu_without_accelerate_config_is_a_plain_process():
    (task,) = plan(LaunchConfig(module="stages.sft", gpus_per_node=1), ["localhost"], STAGE)
    assert task.argv == ["python", "-m", "stages.sft", *STAGE] and task.env == {}


def test_single_node_uses_every_gpu_through_accelerate():
    (task,) = plan(LaunchConfig(module="stages.sft", gpus_per_node=8, accelerate_config=ZERO3), ["gpu-a07"], STAGE)
    assert task.argv[:12] == ["accelerate", "launch", "--config_file", ZERO3, "--num_machines", "1",
                              "--num_processes", "8", "--machine_rank", "0", "--main_process_ip", "gpu-a07"]
    assert task.argv[-len(STAGE) - 2:] == ["-m", "stages.sft", *STAGE]


def test_mixed_precision_from_the_compute_section_overrides_the_accelerate_config():
    (task,) = plan(LaunchConfig(module="stages.sft", gpus_per_node=2, accelerate_config=ZERO3, mixed_precision="no"),
                   ["n1"], STAGE)
    assert task.argv[2:6] == ["--config_file", ZERO3, "--mixed_precision", "no"]


def test_two_jobs_on_one_node_rendezvous_on_different_ports():
    """accelerate's default 29500 for every job: the second single-node job on a node failed to bind it
    (the rehearsal's two reward models, started in the same second on one host)."""
    config = LaunchConfig(module="stages.sft", gpus_per_node=2, accelerate_config=ZERO3)
    argvs = [plan(config, ["n1"], STAGE, job)[0].argv for job in ("111", "112")]
    assert [argv[argv.index("--main_process_port") + 1] for argv in argvs] == ["29611", "29612"]
    (task,) = plan(config, ["localhost"], STAGE)
    assert task.argv[task.argv.index("--main_process_port") + 1] == "29500"  # outside Slurm


def test_multi_node_sft_runs_one_launcher_per_node_with_its_rank():
    hosts = ["gpu-a01", "gpu-a02", "gpu-b11"]
    tasks = plan(LaunchConfig(module="stages.sft", nodes=3, gpus_per_node=4, accelerate_config=ZERO3), hosts, STAGE)
    assert [t.host for t in tasks] == hosts
    for rank, task in enumerate(tasks):
        flags = dict(zip(task.argv[2::2], task.argv[3::2]))
        assert flags["--config_file"] == ZERO3
        assert flags["--num_machines"] == "3" and flags["--num_processes"] == "12"
        assert flags["--machine_rank"] == str(rank) and flags["--main_process_ip"] == "gpu-a01"


def test_multi_node_grpo_serves_vllm_on_the_first_node_and_trains_on_the_others():
    hosts = ["node-17", "node-18", "node-19"]
    config = LaunchConfig(module="stages.grpo", nodes=3, gpus_per_node=8, accelerate_config=ZERO3,
                          vllm_server_gpus=8, vllm_server_tensor_parallel_size=2)
    server, *trainers = plan(config, hosts, STAGE + ["--max_prompt_length", "1024", "--max_completion_length", "8192"])
    assert server.host == "node-17" and server.argv[:4] == ["trl", "vllm-serve", "--model", "results/q/cold_start_sft"]
    assert server.argv[4:8] == ["--tensor_parallel_size", "2", "--data_parallel_size", "4"]
    assert server.argv[-2:] == ["--max_model_len", str(1024 + 8192)]  # the stage's longest sequence
    assert server.env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    assert [t.host for t in trainers] == ["node-18", "node-19"]
    for rank, task in enumerate(trainers):
        flags = dict(zip(task.argv[2::2], task.argv[3::2]))
        assert flags["--num_processes"] == "16" and flags["--machine_rank"] == str(rank)
        assert flags["--main_process_ip"] == "node-18"
        assert task.argv[-8:] == ["--use_vllm", "true", "--vllm_mode", "server", "--vllm_server_host", "node-17",
                                  "--vllm_server_port", "8000"]


def test_single_node_server_mode_splits_the_gpus():
    server, trainer = plan(LaunchConfig(module="stages.grpo", gpus_per_node=8, vllm_server_gpus=2,
                                        accelerate_config=ZERO3), ["gpu-a07"], STAGE)
    assert server.env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert server.ready_url == "http://gpu-a07:8000/health" and server.ready_timeout_s == 1800
    assert trainer.env["CUDA_VISIBLE_DEVICES"] == "2,3,4,5,6,7"
    assert trainer.env["NO_PROXY"].split(",")[0] == "gpu-a07"  # a site's HTTP proxy cannot reach the server
    assert trainer.argv[trainer.argv.index("--num_processes") + 1] == "6"


def test_cpu_nodes_without_accelerate_config_join_through_the_torchrun_launcher():
    tasks = plan(LaunchConfig(module="stages.sft", nodes=2, gpus_per_node=0), ["n1", "n2"], STAGE)
    for rank, task in enumerate(tasks):
        assert task.argv[:3] == ["accelerate", "launch", "--multi_gpu"]
        flags = dict(zip(task.argv[3::2], task.argv[4::2]))
        assert flags["--num_processes"] == "2" and flags["--machine_rank"] == str(rank)


def test_task_prefix_wraps_every_task_for_containers():
    tasks = plan(LaunchConfig(module="stages.grpo", nodes=2, gpus_per_node=4, vllm_server_gpus=4,
                              task_prefix="apptainer exec --nv /images/r1-gpu.sif"), ["n1", "n2"], STAGE)
    assert all(t.argv[:4] == ["apptainer", "exec", "--nv", "/images/r1-gpu.sif"] for t in tasks)


@pytest.mark.parametrize("config, hosts, message", [
    (dict(nodes=2, gpus_per_node=8, vllm_server_gpus=4), ["a", "b"], "takes a whole node"),
    (dict(nodes=1, gpus_per_node=2, vllm_server_gpus=2), ["a"], "leaves no GPU"),
    (dict(nodes=2, gpus_per_node=8), ["a"], "expected 2 node"),
])
def test_impossible_layouts_are_refused(config, hosts, message):
    with pytest.raises(ValueError, match=message):
        plan(LaunchConfig(module="stages.grpo", **config), hosts, STAGE)


def test_server_mode_needs_the_model_path():
    with pytest.raises(ValueError, match="no --model_path"):
        plan(LaunchConfig(module="stages.grpo", gpus_per_node=2, vllm_server_gpus=1), ["a"], ["--max_steps", "5"])


def test_srun_places_one_task_on_its_node_with_explicit_sizes():
    argv = srun_argv(Task("train-1", "node-18", ["accelerate", "launch"], {"X": "1"}), "4242", 8)
    assert argv[:10] == ["srun", "--jobid", "4242", "--nodes", "1", "--ntasks", "1", "--nodelist", "node-18", "--gres"]
    assert argv[-1] == "exec env X=1 accelerate launch"


def test_a_task_with_variables_runs_through_the_real_wrapper_and_sees_them(tmp_path):
    """The vLLM server task and every server-mode trainer carry variables: `exec VAR=value cmd` would
    take the assignment for the program (bash: exit 127)."""
    seen = tmp_path / "seen"
    code = (f"import os; open({str(seen)!r}, 'w')"
            ".write(os.environ['CUDA_VISIBLE_DEVICES'] + ' ' + os.environ['NO_PROXY'])")
    task = Task("train-0", "localhost", _python(code), {"CUDA_VISIBLE_DEVICES": "2,3", "NO_PROXY": "node 7,'x'"})
    assert run([task], wrap=local_argv, poll_s=0.1) == 0
    assert seen.read_text() == "2,3 node 7,'x'"


def test_server_mode_names_the_trainer_node_to_the_vllm_server_for_the_weight_transfer():
    server, trainer = plan(LaunchConfig(module="stages.grpo", gpus_per_node=4, vllm_server_gpus=1), ["localhost"],
                           STAGE)
    assert trainer.env["VLLM_HOST_IP"] == "127.0.0.1" and "VLLM_HOST_IP" not in server.env
    trainers = plan(LaunchConfig(module="stages.grpo", nodes=3, gpus_per_node=8, vllm_server_gpus=8),
                    ["node-17", "node-18", "node-19"], STAGE)[1:]
    assert trainers[0].env["VLLM_HOST_IP"] == "node-18"  # a name that does not resolve here stays a name
    assert "VLLM_HOST_IP" not in trainers[1].env  # only the main process talks to the server


def _python(code):
    return [sys.executable, "-c", code]


def test_run_stops_the_server_when_training_ends():
    started = time.time()
    code = run([Task("vllm-server", "localhost", _python("import time; time.sleep(60)")),
                Task("train-0", "localhost", _python("pass"))], wrap=lambda t: t.argv, poll_s=0.1)
    assert code == 0 and time.time() - started < 30


def test_a_failing_trainer_fails_the_launch_and_stops_the_rest():
    """The others get stop_grace_s to end on their own (a stop signal ends nodes one after another), then are
    stopped: a crash must not leave the other nodes holding their GPUs."""
    started = time.time()
    code = run([Task("train-0", "localhost", _python("import time; time.sleep(60)")),
                Task("train-1", "localhost", _python("import sys; sys.exit(3)"))], wrap=lambda t: t.argv, poll_s=0.1,
               stop_grace_s=2)
    assert code == 3 and 2 <= time.time() - started < 20


SAVES_SLOWLY = """
import os, signal, sys, time
from pathlib import Path
stopped = []
signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
Path(os.environ["PROBE_DIR"], f"ready-{os.environ['RANK']}").touch()
while not stopped:
    time.sleep(0.1)
time.sleep(float(os.environ["SAVE_S"]))  # longer than torchrun's 30 s default shutdown timeout
Path(os.environ["PROBE_DIR"], f"saved-{os.environ['RANK']}").touch()
sys.exit(128 + signal.SIGTERM)
"""


@pytest.mark.slow
def test_a_stop_signal_leaves_the_trainers_time_to_save(tmp_path, monkeypatch):
    """A Slurm time limit signals every process of the job step at once (launcher, torchrun, workers). The
    workers must get the time their save takes: torchrun would kill them 30 s after its own SIGTERM, and a
    second SIGTERM passed on by the launcher would make it kill them at once."""
    import threading

    import psutil

    (tmp_path / "save_probe.py").write_text(SAVES_SLOWLY)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("PROBE_DIR", str(tmp_path))
    monkeypatch.setenv("SAVE_S", "35")
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")  # accelerate
    # a free rendezvous port: the default outside Slurm (29500) may be another test's, on the other xdist worker
    config = LaunchConfig(module="save_probe", nodes=1, gpus_per_node=2, stop_grace_s=120,
                          main_process_port=free_port())
    tasks = plan(config, ["localhost"], [])
    assert tasks[0].env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "120"

    def time_limit():  # as slurmstepd signals a step: every process in it
        deadline = time.time() + 120
        while len(list(tmp_path.glob("ready-*"))) < 2 and time.time() < deadline:
            time.sleep(0.2)
        for process in psutil.Process().children(recursive=True):
            process.send_signal(signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=time_limit, daemon=True).start()
    code = run(tasks, local_argv, poll_s=0.2, stop_grace_s=120, forward_signals=False)
    assert sorted(path.name for path in tmp_path.glob("saved-*")) == ["saved-0", "saved-1"]
    assert code != 0  # a stopped stage is not done: Snakemake reruns it and it resumes


HEALTH_AFTER = """
import http.server, sys, time
time.sleep(float(sys.argv[2]))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health)
open(sys.argv[3], "w").write(str(time.time()))
server.serve_forever()
"""


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_trainers_start_once_the_server_answers_its_health_check(tmp_path):
    port = free_port()
    server = Task("vllm-server", "localhost", [sys.executable, "-c", HEALTH_AFTER, str(port), "1.5",
                                               str(tmp_path / "ready")],
                  ready_url=f"http://127.0.0.1:{port}/health", ready_timeout_s=60)
    trainer = Task("train-0", "localhost", _python(f"import time; open({str(tmp_path / 'started')!r}, 'w')"
                                                   ".write(str(time.time()))"))
    assert run([server, trainer], wrap=lambda t: t.argv, poll_s=0.1) == 0
    assert float((tmp_path / "started").read_text()) >= float((tmp_path / "ready").read_text())


def test_a_server_that_never_answers_fails_the_launch_before_training(tmp_path):
    port = free_port()
    server = Task("vllm-server", "localhost", [sys.executable, "-c", HEALTH_AFTER, str(port), "60",
                                               str(tmp_path / "ready")],
                  ready_url=f"http://127.0.0.1:{port}/health", ready_timeout_s=1)
    trainer = Task("train-0", "localhost", _python(f"open({str(tmp_path / 'started')!r}, 'w')"))
    started = time.time()
    assert run([server, trainer], wrap=lambda t: t.argv, poll_s=0.1) == 1
    assert time.time() - started < 30 and not (tmp_path / "started").exists()


def test_a_dead_server_fails_the_launch_and_stops_the_trainers():
    started = time.time()
    code = run([Task("vllm-server", "localhost", _python("import sys; sys.exit(1)")),
                Task("train-0", "localhost", _python("import time; time.sleep(60)"))], wrap=lambda t: t.argv,
               poll_s=0.1, stop_grace_s=2)
    assert code == 1 and time.time() - started < 20


def test_two_process_data_parallel_sft_publishes_one_complete_model(tiny_model_dir, small_data_dir, tmp_path,
                                                                     venv_env):
    """The launcher's accelerate path for real: two CPU processes train one model (gloo), every
    process takes part in the save, only the main one publishes the output."""
    import json
    import subprocess

    from transformers import AutoModelForCausalLM

    out = tmp_path / "dev1"
    command = [sys.executable, "-m", "stages.launch", "--module", "stages.sft", "--gpus_per_node", "2",
               "--main_process_port", str(free_port()), "--",  # not 29500: the other xdist worker's, maybe
               "--model_path", str(tiny_model_dir), "--train_data", str(small_data_dir / "cold_start.parquet"),
               "--output_dir", str(out), "--work_dir", str(tmp_path / "work"), "--stage", "cold_start_sft",
               "--max_steps", "4", "--per_device_train_batch_size", "4", "--save_steps", "2", "--logging_steps", "1"]
    done = subprocess.run(command, capture_output=True, text=True, env=venv_env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--num_processes 2" in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    history = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    # 4 steps of a global batch of 2 processes x 4 examples: twice the share of the examples one process sees
    examples = SMALL_DATA["num_cold_start"] + SMALL_DATA["num_cold_start_code"]
    assert manifest["metrics"]["examples"] == examples
    assert [row["epoch"] for row in history if "loss" in row][-1] == pytest.approx(4 * 2 * 4 / examples, abs=0.01)
    assert not (tmp_path / "dev1.partial").exists()
    AutoModelForCausalLM.from_pretrained(out)
