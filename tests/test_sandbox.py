"""The code reward's sandbox against hostile programs. Each test runs an attack through the reward
(or the sandbox under it), checks the reward is 0 or the run failed, and then checks on the host that
the attack's effect did not happen: the file outside is unchanged, the listener got no connection,
no process is left, the machine can still fork.

Needs bubblewrap and user namespaces; CI sets R1_REQUIRE_SANDBOX=1 so their absence fails."""

import dataclasses
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from stages.lib.data.schema import parse_tests
from stages.lib.rewards.code import extract_program
from stages.lib.rewards.functions import RewardSettings, build_reward_functions
from stages.lib.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, isolation_problem
from stages.lib.templates import CHAT, R1_ZERO

REPO = Path(__file__).resolve().parent.parent
TEST_FIRST_UID = 62000
ADD = [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6\n"}]


@pytest.fixture(scope="module")
def code_reward():
    problem = isolation_problem()
    if problem and os.environ.get("R1_REQUIRE_SANDBOX") != "1":
        pytest.skip(problem)
    (reward,) = build_reward_functions(["code"], RewardSettings(template="chat", code_timeout_s=3.0))
    # uids of its own: the other pytest worker may be running code rewards in the default range, and the
    # leak checks below count every process in this one
    sandbox = reward.grader.code.sandbox
    sandbox.limits = dataclasses.replace(sandbox.limits, first_uid=TEST_FIRST_UID)
    yield reward
    reward.grader.close()


def answer(program: str) -> str:
    return f"<think>\nI will write it.\n</think>\n\n```python\n{program}\n```"


def score(reward, program: str, tests=ADD) -> float:
    (value,) = reward(completions=[answer(program)], tests=[json.dumps(tests)])
    return value


def sandbox_processes() -> list[str]:
    """Host processes that a sandboxed run started (its uids, or its programs' marker)."""
    out = subprocess.run(["ps", "-eo", "uid=,args="], capture_output=True, text=True).stdout
    uids = range(TEST_FIRST_UID, TEST_FIRST_UID + 256)
    return [line for line in out.splitlines()
            if line.split()[0].isdigit() and int(line.split()[0]) in uids or "r1-sandbox-marker" in line]


def no_sandbox_processes_remain(timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while sandbox_processes():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# ---- the reward itself -------------------------------------------------------------------------------

def test_correct_wrong_and_partial_programs(code_reward):
    assert score(code_reward, "a, b = map(int, input().split())\nprint(a + b)") == 1.0
    assert score(code_reward, "a, b = map(int, input().split())\nprint(a - b)") == 0.0
    assert score(code_reward, "print(5)") == 0.0  # one case of two: pass_all is binary
    assert score(code_reward, "def add(a, b):\n    return a + b", [{"assert": "assert add(2, 3) == 5"}]) == 1.0
    assert score(code_reward, "def add(a, b):\n    return a * b", [{"assert": "assert add(2, 3) == 5"}]) == 0.0
    (none,) = code_reward(completions=[answer("print(1)")], tests=[None])
    assert none is None  # not a code row


def test_fraction_scoring_counts_cases():
    if isolation_problem() and os.environ.get("R1_REQUIRE_SANDBOX") != "1":
        pytest.skip(isolation_problem())
    (reward,) = build_reward_functions(["code"], RewardSettings(template="chat", code_scoring="fraction"))
    try:
        assert score(reward, "print(5)") == 0.5
    finally:
        reward.grader.close()


def test_the_program_is_the_last_python_block_of_the_summary_not_the_reasoning():
    text = "<think>\n```python\nprint('draft')\n```\n</think>\n\n```python\nprint(1)\n```\n```python\nprint(2)\n```"
    assert extract_program(text, CHAT) == "print(2)\n"
    assert extract_program("<think>\n```python\nprint(1)\n```\n</think>\n\nno code", CHAT) is None
    assert extract_program("<think> x </think> <answer> ```py\nprint(3)\n``` </answer>", R1_ZERO) == "print(3)\n"
    assert extract_program("```js\nconsole.log(1)\n```", CHAT) is None


def test_malformed_tests_are_named():
    with pytest.raises(ValueError, match="not JSON"):
        parse_tests("[{")
    with pytest.raises(ValueError, match="test case 1 is neither"):
        parse_tests([{"input": "1", "output": "1"}, {"stdin": "1"}])


def test_many_programs_run_in_parallel_in_order(code_reward):
    programs = [f"print({i} + int(input()))" for i in range(12)]
    tests = [json.dumps([{"input": "1\n", "output": f"{i + 1}\n"}]) for i in range(12)]
    tests[5] = json.dumps([{"input": "1\n", "output": "0\n"}])
    scores = code_reward(completions=[answer(p) for p in programs], tests=tests)
    assert scores == [1.0] * 5 + [0.0] + [1.0] * 6


def test_concurrent_runs_of_two_sandboxes_never_share_a_uid(code_reward):
    """Each rank of a trainer builds its own Sandbox; two runs under one uid would share a process limit."""
    if os.geteuid() != 0:
        pytest.skip("runs switch uid only as root")
    limits = code_reward.grader.code.sandbox.limits
    sandboxes = [Sandbox(limits), Sandbox(limits)]
    program = "import os, time\nprint(os.getuid(), flush=True)\ntime.sleep(1.0)"
    results = [None, None]
    threads = [threading.Thread(target=lambda k=k: results.__setitem__(k, sandboxes[k].run(program))) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    uids = [int(result.stdout) for result in results]
    assert all(result.ok for result in results) and len(set(uids)) == 2, results
    assert all(limits.first_uid <= uid < limits.first_uid + 256 for uid in uids)


def test_exiting_before_the_asserts_does_not_pass_them(code_reward):
    asserts = [{"assert": "assert add(2, 3) == 5"}, {"assert": "assert add(1, 1) == 2"}]
    for early_exit in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit"):
        assert score(code_reward, f"def add(a, b):\n    return 0\n{early_exit}", asserts) == 0.0
    assert score(code_reward, "def add(a, b):\n    return a + b", asserts) == 1.0


def test_pass_all_runs_a_rows_asserts_together_and_its_stdin_cases_apart(code_reward):
    runs, sandbox = [], code_reward.grader.code.sandbox
    run = sandbox.run
    sandbox.run = lambda program, stdin="": runs.append((program, stdin)) or run(program, stdin)
    try:
        cases = [{"assert": f"assert add({i}, 1) == {i + 1}"} for i in range(3)]
        assert score(code_reward, "def add(a, b):\n    return a + b", cases) == 1.0
        assert len(runs) == 1 and all(case["assert"] in runs[0][0] for case in cases)
        runs.clear()
        assert score(code_reward, "a, b = map(int, input().split())\nprint(a + b)") == 1.0
        assert sorted(stdin for _, stdin in runs) == sorted(case["input"] for case in ADD)
    finally:
        sandbox.run = run


def test_a_program_repeated_in_a_batch_runs_once_per_case(code_reward):
    runs, sandbox = [], code_reward.grader.code.sandbox
    run = sandbox.run
    sandbox.run = lambda program, stdin="": runs.append((program, stdin)) or run(program, stdin)
    try:
        adder = answer("a, b = map(int, input().split())\nprint(a + b)")
        other = [{"input": "1 1\n", "output": "3\n"}]  # same program, another row's cases: scored on its own
        scores = code_reward(completions=[adder] * 8 + [adder], tests=[json.dumps(ADD)] * 8 + [json.dumps(other)])
    finally:
        sandbox.run = run
    assert scores == [1.0] * 8 + [0.0]
    assert sorted(stdin for _, stdin in runs) == ["1 1\n", "10 -4\n", "2 3\n"]


# ---- hostile programs ---------------------------------------------------------------------------------

def test_no_network_not_even_the_hosts_loopback(code_reward):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    program = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
               "s.sendall(b'stolen')\nprint(5)")
    assert score(code_reward, program) == 0.0
    with pytest.raises(socket.timeout):
        server.accept()  # nothing ever connected
    server.close()
    dns = "import socket\nsocket.getaddrinfo('example.org', 80)\nprint(5)"
    assert score(code_reward, dns) == 0.0


def test_the_project_and_home_directories_are_invisible(code_reward, tmp_path):
    secret = Path.home() / ".r1-sandbox-test-secret"
    secret.write_text("TOKEN-123")
    try:
        for path in (REPO / "README.md", secret, Path("/etc/shadow"), Path("/root")):
            program = f"import os\nprint(open({str(path)!r}).read() if os.path.isfile({str(path)!r}) else " \
                      f"os.listdir({str(path)!r}))"
            result = code_reward.grader.code.sandbox.run(program)
            assert not result.ok and "TOKEN-123" not in result.stdout and "r1-pipeline" not in result.stdout, path
        os.environ["R1_SANDBOX_TEST_TOKEN"] = "TOKEN-456"  # a credential in the reward's environment
        env = code_reward.grader.code.sandbox.run("import os\nprint(sorted(os.environ.items()))")
        assert env.ok and "TOKEN-456" not in env.stdout
        assert {name for name, _ in eval(env.stdout)} <= {"PATH", "HOME", "LANG", "PWD"}
    finally:
        secret.unlink()
        os.environ.pop("R1_SANDBOX_TEST_TOKEN", None)


def test_writes_outside_the_run_directory_change_nothing(code_reward, tmp_path):
    target = tmp_path / "outside.txt"
    target.write_text("original")
    program = (f"import os\n"
               f"for path in [{str(target)!r}, '/tmp/r1-sandbox-escape', '/usr/r1-escape', "
               f"{str(REPO / 'escape')!r}]:\n"
               "    try:\n        open(path, 'w').write('pwned')\n    except OSError:\n        pass\n"
               "open('own-file.txt', 'w').write('fine')\nprint(5)")
    assert score(code_reward, program) == 0.0  # prints 5 for both cases: one is wrong
    assert target.read_text() == "original"
    for path in ("/tmp/r1-sandbox-escape", "/usr/r1-escape", REPO / "escape"):
        assert not Path(path).exists()


def test_fork_bomb_is_contained_and_cleaned_up(code_reward):
    program = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    started = time.monotonic()
    assert score(code_reward, program) == 0.0
    assert time.monotonic() - started < 2 * (3.0 + 2.0)  # two cases, each at most its deadline
    assert no_sandbox_processes_remain()
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork


def test_memory_bomb_fails_inside_its_limit(code_reward):
    result = code_reward.grader.code.sandbox.run("x = bytearray(8 << 30)\nprint('allocated')")
    assert not result.ok and "allocated" not in result.stdout and "MemoryError" in result.stderr


def test_infinite_loop_and_sleep_are_killed_at_the_deadline(code_reward):
    for program in ("while True:\n    pass", "import time\ntime.sleep(60)"):
        started = time.monotonic()
        result = code_reward.grader.code.sandbox.run(program)
        assert result.timed_out or result.exit_code != 0
        assert time.monotonic() - started < 3.0 + 1.0


def test_output_flood_is_cut(code_reward):
    started = time.monotonic()
    result = code_reward.grader.code.sandbox.run("while True:\n    print('x' * 10000)")
    assert result.output_cut and not result.ok
    assert len(result.stdout) + len(result.stderr) <= SandboxLimits().max_output_bytes
    assert time.monotonic() - started < 3.0 + 1.0


def test_killing_the_parent_or_everything_reaches_nothing_outside(code_reward):
    victim = subprocess.Popen(["sleep", "30"])
    try:
        program = ("import os, signal\n"
                   "for pid in (os.getppid(), 1, -1, " + str(victim.pid) + ", " + str(os.getpid()) + "):\n"
                   "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\nprint(5)")
        code_reward.grader.code.sandbox.run(program)
        assert victim.poll() is None  # the host process it named is alive, and so are we
    finally:
        victim.kill()


def test_background_processes_do_not_outlive_the_run(code_reward):
    program = ("import subprocess, os, time\n"
               "subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(300)', 'r1-sandbox-marker'],\n"
               "                 start_new_session=True)\n"
               "if os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\nprint(5)")
    code_reward.grader.code.sandbox.run(program)
    assert no_sandbox_processes_remain()


def test_ctypes_calls_to_libc_are_contained_too(code_reward, tmp_path):
    target = tmp_path / "ctypes-target.txt"
    target.write_text("original")
    program = ("import ctypes\nlibc = ctypes.CDLL(None)\n"
               f"libc.system(b'echo pwned > {target}')\n"
               "libc.kill(-1, 9)\n"
               "print(libc.getuid())")
    result = code_reward.grader.code.sandbox.run(program)
    assert target.read_text() == "original"
    if os.geteuid() == 0:  # its own unprivileged uid, not root
        assert result.stdout.strip() not in ("", "0") or not result.ok


def test_without_bubblewrap_code_rewards_refuse_unless_allowed(monkeypatch):
    monkeypatch.setattr("stages.lib.rewards.sandbox.isolation_problem", lambda interpreter: "bwrap missing (test)")
    with pytest.raises(SandboxUnavailable, match="refuse to run model code without isolation"):
        Sandbox(SandboxLimits())
    weak = Sandbox(SandboxLimits(allow_rlimit_only=True, wall_time_s=3.0))
    assert not weak.isolated
    assert weak.run("print(input())", stdin="hi\n").stdout == "hi\n"
    assert weak.run("while True:\n    pass").timed_out


@pytest.fixture
def refused_sandbox(monkeypatch):
    """A site whose kernel refuses the sandbox's user namespaces (inside Apptainer, on many HPC nodes)."""
    import stages.lib.rewards.sandbox as sandbox

    monkeypatch.setattr(sandbox, "isolation_problem", lambda interpreter="": "bubblewrap cannot create namespaces")


def test_an_evaluation_with_code_fails_on_a_refused_sandbox_before_it_samples(refused_sandbox, small_data_dir,
                                                                              tmp_path, monkeypatch):
    """It used to fail at scoring the `code` set, the last, after sampling every other set, and lose them
    all (gpu-path-audit-3, N2)."""
    from stages import evaluate

    loaded = []
    monkeypatch.setattr(evaluate, "load_generator", lambda *args, **kwargs: loaded.append(args))
    with pytest.raises(SandboxUnavailable, match="without isolation"):
        evaluate.main(["--model_path", "no-model", "--output_dir", str(tmp_path / "eval"), "--eval_sets",
                       f"math={small_data_dir / 'eval_math.parquet'}", f"code={small_data_dir / 'eval_code.parquet'}"])
    assert loaded == []


def test_rl_with_the_code_reward_fails_on_a_refused_sandbox_when_it_starts(refused_sandbox):
    with pytest.raises(SandboxUnavailable):
        build_reward_functions(["accuracy", "code", "format"], RewardSettings())
    build_reward_functions(["accuracy", "format"], RewardSettings())  # no code reward: no sandbox needed
