"""Starts a training stage on the GPUs of its allocation: one process per GPU through `accelerate
launch` (DeepSpeed from the scale config's accelerate file), one launcher task per node through
`srun` on multi-node jobs, and for GRPO in vLLM server mode a `trl vllm-serve` on the first node
(or the first GPUs of a single node) that the trainers are pointed at.

    python -m stages.launch --module stages.grpo --nodes 2 --gpus_per_node 8 \\
        --accelerate_config configs/accelerate/zero3.yaml --vllm_server_gpus 8 -- --model_path ... --max_steps 500

Inside a Slurm job the node names come from the job itself (`squeue` + `scontrol`): the step that
Snakemake's Slurm executor starts keeps the job id but drops most other SLURM_* variables. A
SIGTERM (Slurm's time limit) is passed on to every task, so trainers can save a checkpoint.
"""

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

from stages.lib.cli import parse_config


@dataclass
class LaunchConfig:
    module: str = field(metadata={"help": "The stage module to run, e.g. stages.grpo."})
    nodes: int = field(default=1)
    gpus_per_node: int = field(default=1)
    accelerate_config: str = field(default="", metadata={"help": "accelerate config file "
                                                                 "(DeepSpeed ZeRO stage etc.)."})
    vllm_server_gpus: int = field(default=0, metadata={
        "help": "GRPO server mode: GPUs that run `trl vllm-serve` (a whole first node when nodes > 1)."})
    vllm_server_tensor_parallel_size: int = field(default=1, metadata={
        "help": "GPUs per vLLM engine; the server runs vllm_server_gpus / this many engines (data parallel)."})
    vllm_server_port: int = field(default=8000)
    vllm_server_startup_s: int = field(default=1800, metadata={
        "help": "How long the trainers wait for the vLLM server's /health: loading, compiling and capturing "
                "CUDA graphs of several engines from a shared file system can outlast TRL's own 240 s wait."})
    mixed_precision: str = field(default="", metadata={
        "help": "accelerate launch --mixed_precision, over the accelerate config's (no, bf16, fp16; '': the file's)."})
    main_process_port: int = field(default=0, metadata={
        "help": "The trainers' rendezvous port. 0: 29500 + the Slurm job id mod 10,000, so that two jobs sharing "
                "a node do not both take accelerate's default 29500 (the second then fails); 29500 outside Slurm."})
    task_prefix: str = field(default="", metadata={
        "help": "Put before every task's command, e.g. `apptainer exec --nv image.sif` (containers)."})
    stop_grace_s: int = field(default=300, metadata={
        "help": "Seconds the trainers get to finish their step and save after a stop signal, or after another "
                "trainer ended, before they are killed (the workflow sets Slurm's early signal lead, "
                "stages/lib/save_lead.py). torchrun's own 30 s would kill them mid-save."})

    def __post_init__(self):
        if self.nodes > 1 and self.vllm_server_gpus not in (0, self.gpus_per_node):
            raise ValueError(f"with {self.nodes} nodes the vLLM server takes a whole node: vllm_server_gpus must be "
                             f"0 or gpus_per_node ({self.gpus_per_node}), not {self.vllm_server_gpus}")
        if self.nodes == 1 and self.vllm_server_gpus >= max(self.gpus_per_node, 1):
            raise ValueError(f"vllm_server_gpus ({self.vllm_server_gpus}) leaves no GPU of the single node "
                             "to train on")
        if self.vllm_server_gpus % self.vllm_server_tensor_parallel_size:
            raise ValueError("vllm_server_gpus must be a multiple of vllm_server_tensor_parallel_size")


@dataclass
class Task:
    name: str
    host: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ready_url: str = ""  # the tasks after this one start once it answers here (a server)
    ready_timeout_s: float = 0.0

    def command(self) -> str:
        """The task as one shell command that `exec` can start: the variables through `env`, since
        `exec VAR=value cmd` takes the assignment for the program's name (exit 127)."""
        env = ["env", *(f"{k}={v}" for k, v in self.env.items())] if self.env else []
        return shlex.join(env + self.argv)


def gpu_list(first: int, count: int) -> str:
    return ",".join(str(i) for i in range(first, first + count))


def stage_arg(stage_args: list[str], flag: str) -> str:
    if flag not in stage_args or stage_args.index(flag) + 1 >= len(stage_args):
        raise ValueError(f"the stage arguments have no {flag}: {shlex.join(stage_args)}")
    return stage_args[stage_args.index(flag) + 1]


def server_context(stage_args: list[str]) -> list[str]:
    """vLLM's context for the trainer's sequences (longest prompt + completion): without one, vLLM plans its
    KV cache for the model's whole context (131,072 positions for Qwen2.5-7B)."""
    flags = ("--max_prompt_length", "--max_completion_length")
    if not all(flag in stage_args for flag in flags) or not int(stage_arg(stage_args, flags[0])):
        return []  # no prompt limit: the model's own context
    return ["--max_model_len", str(sum(int(stage_arg(stage_args, flag)) for flag in flags))]


def host_address(host: str) -> str:
    """The node's address as the other nodes reach it (its name where it does not resolve here)."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def rendezvous_port(config: LaunchConfig, job_id: str | None) -> int:
    if config.main_process_port:
        return config.main_process_port
    return 29500 + int(job_id) % 10_000 if job_id and job_id.isdigit() else 29500


def plan(config: LaunchConfig, hosts: list[str], stage_args: list[str], job_id: str | None = None) -> list[Task]:
    """The tasks to start: the vLLM server (if any) first, then one trainer launcher per training node."""
    if len(hosts) != config.nodes:
        raise ValueError(f"expected {config.nodes} node(s), the allocation has {len(hosts)}: {hosts}")
    prefix = shlex.split(config.task_prefix)
    tasks, train_hosts, first_train_gpu = [], list(hosts), 0
    if config.vllm_server_gpus:
        tp = config.vllm_server_tensor_parallel_size
        server = ["trl", "vllm-serve", "--model", stage_arg(stage_args, "--model_path"),
                  "--tensor_parallel_size", str(tp), "--data_parallel_size", str(config.vllm_server_gpus // tp),
                  "--host", "0.0.0.0", "--port", str(config.vllm_server_port), *server_context(stage_args)]
        tasks.append(Task("vllm-server", hosts[0], prefix + server,
                          {"CUDA_VISIBLE_DEVICES": gpu_list(0, config.vllm_server_gpus)},
                          ready_url=f"http://{hosts[0]}:{config.vllm_server_port}/health",
                          ready_timeout_s=config.vllm_server_startup_s))
        stage_args = stage_args + ["--use_vllm", "true", "--vllm_mode", "server", "--vllm_server_host", hosts[0],
                                   "--vllm_server_port", str(config.vllm_server_port)]
        if config.nodes > 1:
            train_hosts = hosts[1:]
        else:
            first_train_gpu = config.vllm_server_gpus
    gpus = max(config.gpus_per_node - first_train_gpu, 1)
    machines = len(train_hosts)
    for rank, host in enumerate(train_hosts):
        env = {"CUDA_VISIBLE_DEVICES": gpu_list(first_train_gpu, gpus)} if first_train_gpu else {}
        if config.vllm_server_gpus:  # the trainers' HTTP client honours proxy variables: not for the server
            env["NO_PROXY"] = env["no_proxy"] = ",".join(filter(None, [hosts[0], os.environ.get("NO_PROXY", "")]))
            if rank == 0:  # TRL's client names this node to the server's workers for the weight transfer; vLLM
                # would otherwise guess it from the route to a public address, wrong or none on a cluster
                env["VLLM_HOST_IP"] = host_address(host)
        if machines == 1 and gpus == 1 and not config.accelerate_config:
            argv = ["python", "-m", config.module]
        else:
            if config.accelerate_config:
                mode = ["--config_file", config.accelerate_config]
            else:  # accelerate's torchrun launcher; without GPUs its processes join over gloo (CPU data parallel)
                mode = ["--multi_gpu"]
            if config.mixed_precision:
                mode += ["--mixed_precision", config.mixed_precision]
            # torchrun passes a stop signal on to its workers and kills them TORCH_ELASTIC_SHUTDOWN_TIMEOUT later
            env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(config.stop_grace_s)
            argv = ["accelerate", "launch", *mode, "--num_machines", str(machines),
                    "--num_processes", str(machines * gpus),
                    "--machine_rank", str(rank), "--main_process_ip", train_hosts[0],
                    "--main_process_port", str(rendezvous_port(config, job_id)), "-m", config.module]
        tasks.append(Task(f"train-{rank}", host, prefix + argv + stage_args, env))
    return tasks


def allocation_hosts(nodes: int) -> list[str]:
    """Node names of the current Slurm job (or this machine for a single-node run outside Slurm)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        if nodes > 1:
            raise RuntimeError(f"{nodes} nodes requested but this is not a Slurm job (no SLURM_JOB_ID)")
        return ["localhost"]
    nodelist = subprocess.run(["squeue", "-h", "-j", job, "-o", "%N"], check=True, capture_output=True,
                              text=True).stdout.strip()
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], check=True, capture_output=True,
                          text=True).stdout.split()


def srun_argv(task: Task, job_id: str, gpus_per_node: int) -> list[str]:
    """One task on one node of the job, as its own job step (explicit sizes: see the module doc)."""
    gres = ["--gres", f"gpu:{gpus_per_node}"] if gpus_per_node else []
    return ["srun", "--jobid", job_id, "--nodes", "1", "--ntasks", "1", "--nodelist", task.host, *gres,
            "--kill-on-bad-exit=1", "--export", "ALL", "bash", "-c", f"exec {task.command()}"]


def local_argv(task: Task) -> list[str]:
    return ["bash", "-c", f"exec {task.command()}"]


def wait_until_ready(task: Task, process: subprocess.Popen, poll_s: float) -> None:
    """Returns once the task's URL answers 200; raises if the task exits first or the time runs out."""
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + task.ready_timeout_s
    print(f"[launch] waiting for {task.name} at {task.ready_url} (up to {task.ready_timeout_s:.0f} s)", flush=True)
    while process.poll() is None:
        try:
            with no_proxy.open(task.ready_url, timeout=10) as response:
                if response.status == 200:
                    print(f"[launch] {task.name} is ready", flush=True)
                    return
        except OSError:  # not listening yet (URLError and connection errors are OSErrors)
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{task.name} did not answer {task.ready_url} within {task.ready_timeout_s:.0f} s "
                               "(raise compute.<stage>.vllm_server_startup_s)")
        time.sleep(poll_s)
    raise RuntimeError(f"{task.name} exited (code {process.returncode}) before it answered {task.ready_url}")


def run(tasks: list[Task], wrap=local_argv, poll_s: float = 1.0, stop_grace_s: float = 60.0,
        forward_signals: bool = True) -> int:
    """Starts the tasks in order (a task with a ready_url must answer before the next starts), waits
    for the trainers; stops the rest when one fails or all trainers end. Returns the first failing
    trainer's exit code (0 when all succeed; 1 when a server never became ready).

    A stop signal (SIGTERM, Ctrl-C) lets the trainers finish their step and save. Under Slurm every process
    of the job's steps gets it from Slurm itself, and a second one would make torchrun kill its workers at
    once, so it is passed on only outside Slurm (`forward_signals`). After a trainer ends with an error, the
    others get `stop_grace_s` to end on their own (a stop signal ends trainers one node after another; a
    crash leaves the others waiting in a collective) before they are stopped."""
    processes: dict[str, subprocess.Popen] = {}

    def stop(signum=signal.SIGTERM):
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signum)

    def on_signal(signum, _frame):
        print(f"[launch] {signal.Signals(signum).name}: the trainers save and stop", flush=True)
        if forward_signals:
            stop(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    trainers = [task.name for task in tasks if task.name.startswith("train-")]
    try:
        for task in tasks:
            processes[task.name] = subprocess.Popen(wrap(task), start_new_session=True)
            if task.ready_url:
                try:
                    wait_until_ready(task, processes[task.name], poll_s)
                except (RuntimeError, TimeoutError) as error:
                    print(f"[launch] {error}: stopping", flush=True)
                    stop()
                    return 1
        while True:
            codes = {name: processes[name].poll() for name in processes}
            failed = [name for name, code in codes.items() if code not in (None, 0)]
            if failed or all(codes[name] is not None for name in trainers):
                break
            time.sleep(poll_s)
        if failed:
            print(f"task(s) {failed} failed (exit {[codes[n] for n in failed]}): the other trainers get "
                  f"{stop_grace_s:.0f} s to end, then the rest is stopped", flush=True)
            deadline = time.monotonic() + stop_grace_s
            while time.monotonic() < deadline and any(processes[name].poll() is None for name in trainers):
                time.sleep(poll_s)
            codes = {name: processes[name].poll() for name in processes}
        stop()
        for process in processes.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        return next((codes[name] for name in failed if name.startswith("train-")), 0 if not failed else 1)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    config = parse_config(LaunchConfig, argv[:split])
    stage_args = argv[split + 1:]
    tasks = plan(config, allocation_hosts(config.nodes), stage_args, os.environ.get("SLURM_JOB_ID"))
    for task in tasks:
        print(f"[launch] {task.name} on {task.host}: {task.command()}", flush=True)
    job = os.environ.get("SLURM_JOB_ID")
    wrap = (lambda task: srun_argv(task, job, config.gpus_per_node)) if config.nodes > 1 else local_argv
    sys.exit(run(tasks, wrap, stop_grace_s=config.stop_grace_s, forward_signals=not job))


if __name__ == "__main__":
    main()
