"""Rerun committed records at the commit that made them, and say whether each reproduces bit for bit.

    python -m research.rerun research/results/default-run/unvectorised/record.json
    python -m research.rerun research/toy/results/eval-fresh-avx2-respo_wtilt-lr0.01/runs.jsonl:1 --commit HEAD

A RECORD is a JSON file holding one record with its "command", or one line of a runs.jsonl[.gz] (PATH:LINE,
counted from 1). Two kinds of record name no command, and their command is the documented one rebuilt from the
record: a run of the off-policy study (research/offpolicy.py, one cell) and a toy run (research/toy/run.py, one job).

The records of every study before the table study were made at or before COMMIT (research/README.md, "Which
commit each study's records ran on"); a record that names its own "commit" (the table study's) reruns at it. Each
record's command runs in a detached worktree of --commit (default: the record's commit, else COMMIT) made, or reused, at
/tmp/nano-respo-<commit>, with only that tree on PYTHONPATH, one torch thread, a new empty NANO_RESPO_CACHE, the
CPU variables the command names (none else) and its output sent to a scratch folder. A command that names
`experiments/<script>.py` (the path of its time) runs as `python -m research.<script>` where that file is gone.

The rerun's record (the file in its output whose path ends most like the committed one's; a run's record.json
brings its metrics.jsonl) is compared with the committed one on every value the committed one holds but timing
(TIMING) and where and how it was asked for (WHERE: commands, output paths, host names, the parsed options).
Floats compare exactly, NaN equal to NaN; strings read the old `experiments/` as `research/` and a temporary
folder as `<tmp>`. One line per record: bit for bit, or differs with the first differing value (and how many),
and whether its command failed. The exit status is 1 when one differs or fails.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMIT = "9561567"  # the records of the studies before the table study were made at or before it, and rerun there
ROOT = Path(__file__).resolve().parents[1]
TIMING = {"seconds", "wall_s", "gen_tokens_per_s", "train_tokens_per_s", "tokens_per_s", "iteration_s", "finished",
          "load_average", "made"}
WHERE = {"command", "source_command", "out", "out_dir", "records", "host", "cpu",
         "config"}  # config: the options the command parsed, which a later script may name otherwise
CPU_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
BESIDE = {"record.json": ("metrics.jsonl",)}  # a record whose numbers lie in files beside it
TOY_CPU = {"AVX2": "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ", "DEFAULT": "ATEN_CPU_CAPABILITY=default ",
           "AVX512": ""}


def read_lines(path: Path) -> list[dict]:
    text = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load(spec: str) -> tuple[Path, int | None, dict]:
    """(path, line or None, record) of RECORD: a JSON file, or PATH:LINE of a .jsonl[.gz]."""
    path, _, line = spec.rpartition(":") if re.search(r"\.jsonl(\.gz)?:\d+$", spec) else (spec, "", "")
    path = Path(path)
    if line:
        return path, int(line), read_lines(path)[int(line) - 1]
    return path, None, json.loads(path.read_text())


def command_of(record: dict) -> str:
    """The record's command, or the documented one for an off-policy run or a toy run, which record none."""
    if "command" in record:
        return record["command"]
    if {"source", "arm", "setting"} <= record.keys():
        cpu = "ATEN_CPU_CAPABILITY=default " if record["setting"] == "scalar" else ""
        return (f"{cpu}python -m research.offpolicy --models {record['model']} --sources {record['source']} "
                f"--arms {record['arm']} --seeds {record['seed']}")
    if {"env", "key", "loss"} <= record.keys():
        if record.get("cpu_capability") not in TOY_CPU:
            raise SystemExit(f"a toy run without a known cpu_capability ({record.get('cpu_capability')}): no command")
        flags = [f"--{name.replace('_', '-')} {record[name]}" for name in
                 ("iterations", "prompts_per_batch", "group_size", "minibatches", "hidden", "max_grad_norm",
                  "adv_scale", "heldout_samples")]
        flags += [f"--{name.replace('_', '-')} {value!r}" for name, value in record["loss"].items()]
        flags += ["--skip-silent-steps"] * bool(record.get("skip_silent_steps"))
        return (f"{TOY_CPU[record['cpu_capability']]}python -m research.toy.run --env {record['env']} "
                f"--methods {record['method']} --reuse {record['reuse']} --seeds {record['seed']} "
                f"--lrs {record['method']}={record['lr']!r} {' '.join(flags)} --workers 1")
    raise SystemExit("the record names no command")


def worktree(commit: str) -> Path:
    """A detached worktree of the commit under /tmp (made once, then reused)."""
    sha = subprocess.run(["git", "rev-parse", f"{commit}^{{commit}}"], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    tree = Path(tempfile.gettempdir()) / f"nano-respo-{sha[:7]}"
    if not (tree / ".git").exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=ROOT, check=True,
                       capture_output=True)
    here = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, check=True, capture_output=True, text=True)
    if here.stdout.strip() != sha:
        raise SystemExit(f"{tree} is not at {sha}")
    return tree


def prepare(command: str, tree: Path, scratch: Path) -> tuple[dict, list[str]]:
    """(environment, argv) of the command as it runs in the worktree, its output sent into `scratch`."""
    words = shlex.split(command.replace("<empty dir>", "-"))  # NANO_RESPO_CACHE=<empty dir>: a new one, below
    env = {k: v for k, v in os.environ.items() if k not in (*CPU_VARIABLES, "NANO_RESPO_CACHE", "PYTHONPATH")}
    env.update(OMP_NUM_THREADS="1", TQDM_DISABLE="1", PYTHONPATH=str(tree), NANO_RESPO_CACHE=str(scratch / "cache"))
    while "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words.pop(0).partition("=")
        if name != "NANO_RESPO_CACHE":  # an empty one, or a folder of its time: a new empty one here
            env[name] = value
    if words[0] != "python":
        raise SystemExit(f"not a python command: {command}")
    script = words[1]
    moved = script.startswith("experiments/") and not (tree / script).exists()  # research/ since 827d766
    argv = [sys.executable, *(["-m", f"research.{Path(script).stem}"] if moved else [script]), *words[2:]]
    out = False
    for i, word in enumerate(argv[:-1]):
        if word in ("--out", "--records"):
            name = Path(argv[i + 1]).name
            argv[i + 1], out = str(scratch / "out" / (name if name.endswith((".json", ".jsonl")) else "")), True
        elif word == "--out-dir":
            argv[i + 1] = str(scratch / "runs")
    return env, argv + ([] if out else ["--out", str(scratch / "out")])


def counterpart(committed: Path, out: Path) -> Path | None:
    """The file under `out` whose path ends in the most parts of the committed record's."""
    def shared(path: Path) -> int:  # runs.jsonl.gz, committed compressed, ends like runs.jsonl
        mine, theirs = path.parts, committed.with_name(committed.name.removesuffix(".gz")).parts
        n = 0
        while n < min(len(mine), len(theirs)) and mine[-1 - n] == theirs[-1 - n]:
            n += 1
        return n
    best = max((p for p in out.rglob("*") if p.is_file()), key=shared, default=None)
    return best if best is not None and shared(best) else None


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


def plain(value):
    if isinstance(value, str):
        return re.sub(r"/tmp/tmp\w+", "<tmp>", value.replace("experiments/", "research/"))
    return value


def differences(committed, rerun, where: str = "") -> list[str]:
    """Every value of the committed record (but TIMING and WHERE) the rerun does not hold bit for bit."""
    if isinstance(committed, dict) and isinstance(rerun, dict):
        found = []
        for key, value in committed.items():
            if key in TIMING or key in WHERE:
                continue
            if key not in rerun:
                found.append(f"{where}{key}: {json.dumps(value)[:80]} (missing in the rerun)")
            else:
                found += differences(value, rerun[key], f"{where}{key}.")
        return found
    if isinstance(committed, list) and isinstance(rerun, list):
        if len(committed) != len(rerun):
            return [f"{where.rstrip('.')}: {len(committed)} entries != {len(rerun)}"]
        return [d for i, (a, b) in enumerate(zip(committed, rerun)) for d in differences(a, b, f"{where}{i}.")]
    if same(plain(committed), plain(rerun)):
        return []
    return [f"{where.rstrip('.')}: {json.dumps(committed)[:80]} != {json.dumps(rerun)[:80]}"]


def rerun(spec: str, commit: str | None) -> tuple[float, list[str], str, str]:
    """Run the record's command at the commit (None: the one the record names, else COMMIT): (seconds, differences
    from the committed record, failure or "", the commit)."""
    path, line, record = load(spec)
    commit = commit or (record.get("commit") if line is None else None) or COMMIT
    tree = worktree(commit)
    with tempfile.TemporaryDirectory(prefix="rerun-") as scratch:
        scratch = Path(scratch)
        env, argv = prepare(command_of(record), tree, scratch)
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        failed = f"its command exited {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}"
        failed = failed if done.returncode else ""
        made = counterpart(path.resolve(), scratch / "out")
        if made is None:
            return seconds, [f"the rerun wrote no {path.name}"], failed, commit
        if line is None:
            found = differences(record, json.loads(made.read_text()))
        else:
            runs = read_lines(made)
            found = differences(record, ([r for r in runs if r.get("key") == record.get("key")] or runs)[-1])
        for name in BESIDE.get(path.name, ()):
            if (path.parent / name).exists():
                beside = made.parent / name
                found += (differences(read_lines(path.parent / name), read_lines(beside), f"{name}:")
                          if beside.exists() else [f"the rerun wrote no {name}"])
    return seconds, found, failed, commit


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.rerun", description=__doc__.split("\n")[0])
    parser.add_argument("records", nargs="+", metavar="RECORD", help="a record file, or PATH:LINE of a runs.jsonl")
    parser.add_argument("--commit", default=None,
                        help=f"the commit to rerun at (default: the one the record names, else {COMMIT})")
    args = parser.parse_args(argv)
    status = 0
    for spec in args.records:
        seconds, found, failed, commit = rerun(spec, args.commit)
        verdict = f"differs ({len(found)} values; first {found[0]})" if found else "bit for bit"
        print(f"{spec}: {verdict}{'; ' + failed if failed else ''}; {seconds:.0f} s at {commit}", flush=True)
        status |= bool(found or failed)
    return status


if __name__ == "__main__":
    sys.exit(main())
