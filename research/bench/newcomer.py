"""What a newcomer waits for: a fresh clone with an empty cache, timed command by command.

    python -m research.bench.newcomer                                   # clone this checkout's HEAD into a temporary folder
    python -m research.bench.newcomer --record research/bench/results/newcomer.json
    python -m research.bench.newcomer --only "pytest -q"                # one step (tests/run/test_benchmarks.py)

In a fresh clone of HEAD (this environment's packages, the clone first on PYTHONPATH, NANO_RESPO_CACHE at a
new empty directory, one torch thread, progress bars on), it runs, in order, and times each: the README's `python train.py`,
each notebook as `python notebooks/build.py <name>` (the same kernel execution a reader's Jupyter does), and
`python -m pytest -q` (the derivation tier) and each other tier. A command that fails stops the
measurement with its output, except a test run, whose failed tests are recorded: the figures check
(research/tests/test_figures.py) fails in the run that makes the record its README times are read from,
by those times alone. The machine's load average is recorded before and after: on a shared 2-core
machine the times move with it. README.md's quick start reads the record (research/figures.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The core slots, one notebook each (notebooks/build.py matches a slot number in the core only), then the exercises;
# the deeper tier is read on demand, not on a newcomer's first path.
NOTEBOOKS = ("01", "02", "03", "04", "05", "exercises.py", "exercises_solutions")
TIERS = ("step", "run", "course")


def timed(command: list[str], cwd: Path, env: dict) -> tuple[float, list[str]]:
    """(seconds, the tests it reports failed): a command that is no test run and fails stops the measurement."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    failed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    if done.returncode and not failed:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}) after {seconds:.0f} s:\n"
                         f"{(done.stdout + done.stderr)[-3000:]}")
    return round(seconds, 1), failed


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="time only these steps (names as printed: train, 'notebook 01', 'pytest -q', tests/step)")
    parser.add_argument("--record", help="also write the times to this JSON file")
    args = parser.parse_args(argv)
    from research.lab.records import measurement, write_record

    seconds, failed, load = {}, {}, {"before": list(os.getloadavg())}
    with tempfile.TemporaryDirectory() as tmp:
        clone, cache = Path(tmp) / "nano-respo", Path(tmp) / "cache"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
        env = {**os.environ, "NANO_RESPO_CACHE": str(cache), "PYTHONPATH": str(clone), "OMP_NUM_THREADS": "1",
               "HF_HUB_OFFLINE": "1"}
        env.pop("TQDM_DISABLE", None)  # the progress bars a newcomer sees (tests check them)
        env.pop("HYPOTHESIS_PROFILE", None)  # the quick profile, as a newcomer runs the tests
        steps = [("train", [sys.executable, "train.py"])]
        steps += [(f"notebook {n.removesuffix('.py')}", [sys.executable, "notebooks/build.py", n]) for n in NOTEBOOKS]
        steps += [("pytest -q", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])]
        steps += [(f"tests/{t}", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/{t}"])
                  for t in TIERS]
        unknown = set(args.only or ()) - {name for name, _ in steps}
        if unknown:
            raise SystemExit(f"--only: unknown step {sorted(unknown)[0]!r}; choose from {', '.join(n for n, _ in steps)}")
        for name, command in [(n, c) for n, c in steps if not args.only or n in args.only]:
            seconds[name], failed[name] = timed(command, clone, env)
            print(f"{name}: {seconds[name]:.0f} s" + (f", failed: {', '.join(failed[name])}" if failed[name] else ""),
                  flush=True)
    load["after"] = list(os.getloadavg())
    print(f"load average before {load['before'][0]:.1f}, after {load['after'][0]:.1f}")
    record = measurement("research.bench.newcomer", {"commit": commit, "seconds": seconds, "load_average": load,
                                               "failed": {name: tests for name, tests in failed.items() if tests}}, argv)
    write_record(record, args.record)
    return record


if __name__ == "__main__":
    main()
