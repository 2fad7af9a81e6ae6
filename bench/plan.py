"""How long `snakemake -n` takes to plan the DAG with many generation shards.

    .venv/bin/python bench/plan.py --shards 1000 10000 [--config configs/<scale>.yaml]

Prints one line per shard count: the shard count, the planned generate jobs and the wall
time of the dry run, and the command that measured it. Uses the given config (default
configs/tiny.yaml) with only `rejection_sampling.num_shards` changed.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def plan_seconds(shards: int, config_path: Path) -> tuple[float, int]:
    config = yaml.safe_load(config_path.read_text())
    config["rejection_sampling"]["num_shards"] = shards
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        started = time.perf_counter()
        done = subprocess.run(["snakemake", "-n", "all", "-s", str(REPO / "Snakefile"), "-d", workdir, "--cores", "2",
                               "--quiet", "rules", "--configfile", str(path)],
                              capture_output=True, text=True, env=env, check=True)
        elapsed = time.perf_counter() - started
    jobs = next((int(line.split()[-1]) for line in done.stdout.splitlines() if line.split()[:1] == ["generate"]), 0)
    return elapsed, jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "tiny.yaml")
    args = parser.parse_args()
    for shards in args.shards:
        seconds, jobs = plan_seconds(shards, args.config)
        print(f"shards={shards} planned_generate_jobs={jobs} dry_run_s={seconds:.1f}")
    print("command: " + " ".join([Path(sys.executable).name, "bench/plan.py", "--shards", *map(str, args.shards),
                                  "--config", str(args.config)]))


if __name__ == "__main__":
    main()
