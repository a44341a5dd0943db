"""Make the warm starts that ship with the package (nano_respo/shipped.py), or retrain them to check them.

    python tools/ship_warm_starts.py                          # both tiny models, into nano_respo/warm_starts/
    python tools/ship_warm_starts.py --models tiny-qwen3 --out /tmp/retrained
    python tools/ship_warm_starts.py --reevaluate             # the shipped weights' held-out figures, evaluated here

Each model's warm start is train.py's (its default settings on `reverse`), trained from scratch in an
empty cache of its own (one torch thread), then evaluated as a run's first `eval` line evaluates it.
It is written as a `from_pretrained` directory <out>/<model>-reverse/ with manifest.json: the command,
the warm start's cache key (settings, data, code version, library versions, CPU setting), its report
(converged_at, steps, exact), the seconds it took and its held-out figures with the CPU setting they were
evaluated on (a change of the sampler changes them, not the weights: --reevaluate rewrites only them).
tests/run/test_shipped_warm_starts.py runs this with --out and compares with the shipped files.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from nano_respo.cli import from_flat
from nano_respo.models import load_model
from nano_respo.sft import cpu_setting, initial_model
from nano_respo.shipped import SHIPPED_DIR
from nano_respo.tasks import make_task
from train import TrainConfig, evaluate_heldout

MODELS = ("tiny-qwen3", "tiny-qwen3-moe")


def ship(model_name: str, out: Path, argv: list[str]) -> dict:
    """Train `model_name`'s default warm start in a new empty cache and write it with its manifest under `out`."""
    cfg = from_flat(TrainConfig, dict(model=model_name, sft_from_scratch=True, device="cpu"))
    task = make_task(cfg.task, cfg.task_size, cfg.eval_problems, cfg.heldout_file, seed=0)  # as train.set_up does
    task.check_budget(cfg.max_new_tokens)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["NANO_RESPO_CACHE"] = cache
        torch.manual_seed(cfg.seed)  # as train.set_up does before the model is built
        start = time.perf_counter()
        model, tokenizer = initial_model(cfg, task, "cpu")
        seconds = round(time.perf_counter() - start)
        heldout = evaluate_heldout(model, tokenizer, task, cfg, contextlib.nullcontext())  # the run's first eval
        (entry,) = (Path(cache) / "sft").glob("*/warm_start.json")
        made = json.loads(entry.read_text())
        target = out / f"{model_name}-{task.name}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(entry.parent, target, ignore=shutil.ignore_patterns("warm_start.json"))
    manifest = {"command": shlex.join(["python", "tools/ship_warm_starts.py", *argv]), "key": made["key"],
                "named_as": made["named_as"], "report": made["report"], "seconds": seconds,
                "heldout": {k: v for k, v in heldout.items() if k.startswith("heldout_")},
                "heldout_evaluated_on": cpu_setting(), "made": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (target / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{target}: converged at step {made['report']['converged_at']} of {made['report']['steps']}, "
          f"held-out pass@1 {heldout['heldout_pass@1']:.3f}, {seconds} s")
    return manifest


def reevaluate(model_name: str) -> None:
    """Evaluate a shipped warm start's weights as a run's first `eval` line does, and rewrite its manifest's figures."""
    cfg = TrainConfig(model=model_name, device="cpu")
    task = make_task(cfg.task, cfg.task_size, cfg.eval_problems, cfg.heldout_file, seed=0)
    path = SHIPPED_DIR / f"{model_name}-{task.name}"
    model, tokenizer = load_model(str(path), cfg.dtype, "cpu")
    heldout = evaluate_heldout(model, tokenizer, task, cfg, contextlib.nullcontext())
    manifest = json.loads((path / "manifest.json").read_text())
    manifest |= {"heldout": heldout, "heldout_evaluated_on": cpu_setting()}
    (path / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{path}: held-out pass@1 {heldout['heldout_pass@1']:.3f} on {cpu_setting()}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR, help="where the directories go")
    parser.add_argument("--reevaluate", action="store_true", help="only evaluate the shipped weights again, here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for model_name in args.models:
        if args.reevaluate:
            reevaluate(model_name)
        else:
            ship(model_name, args.out, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
