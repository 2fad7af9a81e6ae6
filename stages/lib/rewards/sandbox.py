"""Runs untrusted programs (the model's code) where they can do no harm.

Each run gets a throw-away directory and, through bubblewrap, its own user, PID, network, IPC and
mount namespaces: no network (not even the host's loopback), a read-only view of the system's
/usr alone (no /home, /root, project, results or credentials), a private /tmp, an empty
environment. Resource limits cap CPU time, address space, processes, open files and file size;
output beyond `max_output_bytes` is cut and the run killed. At the wall-clock deadline the whole
process group goes, and with it the PID namespace: children, daemons and all.

Run as root, each run also drops to its own unprivileged uid (`first_uid` + slot), so the process
limit counts only that run's processes. A uid is claimed with a lock file shared by every process on the
node (the ranks of a trainer, the shards of a job), so no two concurrent runs share one.

Without bubblewrap (or user namespaces), code rewards are refused unless `allow_rlimit_only` is set:
then programs run with the same limits and directory but none of the isolation, which is announced loudly.

    sandbox = Sandbox(SandboxLimits())
    result = sandbox.run("print(input())", stdin="hi\\n")
"""

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass

SANDBOX_DIR = "/sandbox"
PROGRAM = "main.py"
_warned_unsafe = False


@dataclass(frozen=True)
class SandboxLimits:
    wall_time_s: float = 5.0
    cpu_time_s: int = 4
    memory_mb: int = 512  # address space
    max_processes: int = 32
    max_open_files: int = 64
    max_file_mb: int = 16  # largest file a program may write (its directory and /tmp are private)
    max_output_bytes: int = 1 << 20
    interpreter: str = "/usr/bin/python3"
    first_uid: int = 61000  # root only: run k uses uid first_uid + k
    allow_rlimit_only: bool = False


@dataclass
class RunResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when killed at the deadline or for its output
    timed_out: bool = False
    output_cut: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_cut


class SandboxUnavailable(RuntimeError):
    pass


def isolation_probe(interpreter: str = "/usr/bin/python3") -> list[str]:
    """A program run as the sandbox runs one: it fails where namespaces are refused."""
    return ["bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
            "--dev", "/dev", "--", interpreter, "-c", "pass"]


def isolation_problem(interpreter: str = "/usr/bin/python3") -> str | None:
    """Why bubblewrap isolation cannot run here, or None."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)"
    probe = subprocess.run(isolation_probe(interpreter), capture_output=True, text=True)
    if probe.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {probe.stderr.strip()[:300]}"
    return None


class Sandbox:
    """Runs programs under `limits`; thread-safe, each concurrent run in its own slot (uid)."""

    def __init__(self, limits: SandboxLimits):
        self.limits = limits
        if not limits.interpreter.startswith("/usr/"):
            raise ValueError(f"the sandbox interpreter must live under /usr (the only directory it sees), "
                             f"not {limits.interpreter}")
        missing = [tool for tool in ("prlimit", "setpriv") if shutil.which(tool) is None]
        if missing:
            raise SandboxUnavailable(f"{' and '.join(missing)} not found: the sandbox sets its limits with "
                                     "util-linux (Debian: apt-get install util-linux)")
        problem = isolation_problem(limits.interpreter)
        self.isolated = problem is None
        if problem and not limits.allow_rlimit_only:
            raise SandboxUnavailable(f"code rewards refuse to run model code without isolation: {problem}. "
                                     "Set allow_rlimit_only to accept resource limits alone.")
        if problem:
            global _warned_unsafe
            if not _warned_unsafe:
                print(f"WARNING: {problem}. Model code runs WITHOUT isolation (resource limits only): it can "
                      "read and write your files and reach the network.", file=sys.stderr, flush=True)
                _warned_unsafe = True
        self._slots = list(range(256))
        self._lock = threading.Lock()

    def run(self, program: str, stdin: str = "") -> RunResult:
        with self._slot() as slot, tempfile.TemporaryDirectory(prefix="r1-sandbox-") as directory:
            return self._run(program, stdin, directory, slot)

    @contextmanager
    def _slot(self):
        """A slot free in this process and, when runs switch uid, its uid free on the node: every rank of a
        trainer has its own Sandbox, and two runs under one uid would share its process limit."""
        with self._lock:
            free = list(self._slots)
            claim = None
            for slot in free:
                claim = _claim_uid(self.limits.first_uid + slot) if os.geteuid() == 0 and self.isolated else -1
                if claim is not None:
                    break
            if claim is None:
                raise SandboxUnavailable(f"all {len(free)} sandbox uids from {self.limits.first_uid} are in use on "
                                         f"this node (lock files in {UID_LOCK_DIR})")
            self._slots.remove(slot)
        try:
            yield slot
        finally:
            if claim >= 0:
                os.close(claim)
            with self._lock:
                self._slots.append(slot)

    def _argv(self, directory: str, slot: int) -> list[str]:
        """Limits and the uid switch are commands in front of bwrap (util-linux prlimit and setpriv), not
        a preexec function: that would make Python fork the whole parent, ~160 ms per run from a 3 GB
        trainer, where without one it can vfork."""
        limits, as_root = self.limits, os.geteuid() == 0 and self.isolated
        uid = limits.first_uid + slot
        # not root: the process limit counts every process of this user, so allow for those running now
        processes = limits.max_processes + (0 if as_root else _processes_of(os.getuid()))
        argv = ["prlimit", f"--cpu={limits.cpu_time_s}:{limits.cpu_time_s + 1}", f"--as={limits.memory_mb << 20}",
                f"--nofile={limits.max_open_files}", f"--fsize={limits.max_file_mb << 20}", "--core=0",
                f"--nproc={processes}", "--"]
        if as_root:
            argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
        command = [limits.interpreter, "-I", PROGRAM]  # -I: no user site, no PYTHON* variables
        if not self.isolated:
            return argv + command
        return argv + ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1",
                       "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                       "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
                       "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                       "--bind", directory, SANDBOX_DIR, "--chdir", SANDBOX_DIR,
                       "--", *command]

    def _run(self, program: str, stdin: str, directory: str, slot: int) -> RunResult:
        path = os.path.join(directory, PROGRAM)
        with open(path, "w", encoding="utf-8") as f:
            f.write(program)
        if os.geteuid() == 0 and self.isolated:
            os.chown(directory, self.limits.first_uid + slot, self.limits.first_uid + slot)
        env = {"PATH": "/usr/bin:/bin", "HOME": SANDBOX_DIR if self.isolated else directory, "LANG": "C.UTF-8"}
        process = subprocess.Popen(self._argv(directory, slot), cwd=directory, env=env, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        out, err, cut = bytearray(), bytearray(), threading.Event()

        def pump(stream, buffer):
            while chunk := stream.read(65536):
                if len(out) + len(err) + len(chunk) > self.limits.max_output_bytes:
                    cut.set()
                    _kill_group(process)
                    break
                buffer.extend(chunk)

        readers = [threading.Thread(target=pump, args=(process.stdout, out), daemon=True),
                   threading.Thread(target=pump, args=(process.stderr, err), daemon=True)]
        for reader in readers:
            reader.start()
        try:
            process.stdin.write(stdin.encode("utf-8", errors="replace"))
            process.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the program did not read its input
        # A timer kills at the deadline while this thread blocks in waitpid: Popen.wait(timeout=) polls
        # with growing sleeps, which added ~15 ms to every ~20 ms run.
        deadline = threading.Event()

        def expire():
            deadline.set()
            _kill_group(process)

        timer = threading.Timer(self.limits.wall_time_s, expire)
        timer.start()
        process.wait()
        timer.cancel()
        timed_out = deadline.is_set()
        _kill_group(process)  # also whatever it left behind in its session
        process.wait()
        for reader in readers:
            reader.join(timeout=2.0)
        if not self.isolated:
            _kill_leftovers_in(directory)
        killed = timed_out or cut.is_set()
        return RunResult(stdout=out.decode("utf-8", errors="replace"), stderr=err.decode("utf-8", errors="replace"),
                         exit_code=None if killed else process.returncode, timed_out=timed_out,
                         output_cut=cut.is_set())


UID_LOCK_DIR = os.path.join("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir(), "r1-sandbox-uids")


def _claim_uid(uid: int) -> int | None:
    """A locked descriptor that holds `uid` for one run (the kernel drops the lock if the process dies), or
    None when another run on this node holds it."""
    os.makedirs(UID_LOCK_DIR, exist_ok=True)
    descriptor = os.open(os.path.join(UID_LOCK_DIR, str(uid)), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
            except FileNotFoundError:
                pass
    return count


def _kill_leftovers_in(directory: str) -> None:
    """rlimit-only mode: a process that left its session still runs in the run's directory."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd").startswith(directory):
                    os.kill(int(entry), signal.SIGKILL)
            except (FileNotFoundError, PermissionError, ProcessLookupError, OSError):
                pass

