"""Progress a rerun picks up, kept one way: an append-only JSON-lines log whose first line is the fingerprint
of what makes its records (settings, inputs). A rerun with the same fingerprint replays the records written
whole (a kill mid-write tears at most the last line), keeps those it can use and appends after them; another
fingerprint starts the log afresh. Generation shards, rejection sampling's verified chunks and its judge's
verdicts keep their progress in one. A training stage's work directory holds checkpoints the Trainer writes,
not records: it keeps the same fingerprint in a stamp file (`stamp_matches`, `write_stamp`)."""

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


def fingerprint_text(fingerprint: dict) -> str:
    return json.dumps(fingerprint, sort_keys=True, default=str)


def stamp_matches(stamp: Path, fingerprint: dict) -> bool:
    """Whether progress guarded by `stamp` was made with these settings and inputs."""
    return stamp.exists() and stamp.read_text() == fingerprint_text(fingerprint)


def write_stamp(stamp: Path, fingerprint: dict) -> None:
    stamp.write_text(fingerprint_text(fingerprint))


def record_line(record: dict) -> bytes:
    return json.dumps(record, ensure_ascii=False).encode() + b"\n"


class ProgressLog:
    """Open it, `replay()` what is there, `keep(n)` the first n records that still serve, then `append`.
    Appending without `keep` keeps every record replayed so far (and drops a torn last line)."""

    def __init__(self, path: str | Path, fingerprint: dict):
        self.path = Path(path)
        header = record_line({"fingerprint": json.loads(fingerprint_text(fingerprint))})
        with open(self.path, "rb") if self.path.exists() else open(os.devnull, "rb") as f:
            self.resumed = f.readline() == header
        if not self.resumed:
            if self.path.exists():
                print(f"{self.path} holds progress of other settings or inputs: starting afresh", flush=True)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_bytes(header)
        self.ends = [len(header)]  # where the header ends, then where each replayed record does
        self.writer = None

    def replay(self) -> Iterator[dict]:
        """The records written whole, in order, up to the first torn one."""
        with open(self.path, "rb") as f:
            f.seek(self.ends[0])
            for line in f:
                try:
                    record = json.loads(line) if line.endswith(b"\n") else None
                except json.JSONDecodeError:
                    record = None
                if record is None:
                    return
                self.ends.append(self.ends[-1] + len(line))
                yield record

    def keep(self, count: int) -> None:
        """Keeps the first `count` replayed records and drops the rest of the file."""
        with open(self.path, "r+b") as f:
            f.truncate(self.ends[count])
        del self.ends[count + 1:]

    def append(self, records: list[dict], sync: bool = False) -> None:
        """Adds records; `sync` also waits until they are on disk (a node that dies keeps them)."""
        if self.writer is None:
            self.keep(len(self.ends) - 1)
            self.writer = open(self.path, "ab")
        self.writer.write(b"".join(record_line(record) for record in records))
        self.writer.flush()
        if sync:
            os.fsync(self.writer.fileno())

    def copy_records(self, destination: str | Path) -> None:
        """The records alone (no fingerprint line), as a JSON-lines file."""
        with open(self.path, "rb") as source, open(destination, "wb") as out:
            source.seek(self.ends[0])
            shutil.copyfileobj(source, out)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
