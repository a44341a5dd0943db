"""What the experiment scripts share: where a record's command and CPU setting come from, the warm start
measured from an empty cache, and the grid of train.py runs (model x method x setting x seed).

Each study is one entry script beside this module (run.py, select_lr.py, gate1.py, gate2.py,
offpolicy.py, warm_start_stop.py, across.py, figures.py); they import this one as
`research.common`, which `pip install -e .` makes importable from anywhere.

The grids' records were made before the published kernel became `respo`: their ReSPO is the
reconstruction, `respo_wtilt` (ExperimentConfig's first method), and every train.py run they launch
pins what they relied on of the defaults of the time (AS_RECORDED_FLAGS: the aggregation
`seq-mean-token-sum-norm`; ExperimentConfig.epochs, 2, is passed as --epochs already).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from nano_respo.kernel import DIAGNOSTIC_KEYS, reuse_split
from nano_respo.models import cache_dir
from nano_respo.runs import read_metrics
from nano_respo.sft import initial_model
from nano_respo.tasks import make_task
from research.lab.report import parse_claim, parse_setting
from train import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
CPU_SETTING_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


# --- a record's provenance ---------------------------------------------------------------

def provenance(module: str, argv=None, empty_cache: bool = True) -> dict:
    """A record's "command" (the CPU variables set, then python -m module and the arguments as given) and
    "cpu_setting"."""
    setting = {name: os.environ.get(name) for name in CPU_SETTING_VARIABLES}
    prefix = " ".join(f"{k}={v}" for k, v in setting.items() if v)
    arguments = shlex.join(["-m", module, *(sys.argv[1:] if argv is None else argv)])
    return {"command": " ".join(filter(None, [prefix, "NANO_RESPO_CACHE=<empty dir>" if empty_cache else "",
                                              "python", arguments])),
            "cpu_setting": {"avx2": "avx2", "default": "unvectorised"}.get(setting["ATEN_CPU_CAPABILITY"], "default")}


def require_empty_cache() -> Path:
    """The gate is measured from an empty cache: a warm start trained here, under this CPU setting."""
    if "NANO_RESPO_CACHE" not in os.environ:
        raise ValueError("NANO_RESPO_CACHE: point it at a new, empty directory (the gate trains its own warm start)")
    path = cache_dir()
    if path.exists() and any(path.iterdir()):
        raise ValueError(f"NANO_RESPO_CACHE: {path} is not empty; point it at a new directory")
    return path


def task_of(train_cfg: TrainConfig):
    """The task of a train.py run, its generation budget checked, as train.set_up builds it."""
    task = make_task(train_cfg.task, train_cfg.task_size, train_cfg.eval_problems, train_cfg.heldout_file, seed=0)
    task.check_budget(train_cfg.max_new_tokens)
    return task


def warm_start_here(train_cfg: TrainConfig, task) -> tuple:
    """(model, tokenizer, report): train.py's warm start trained here, in the empty NANO_RESPO_CACHE, and
    timed; the report holds its converged_at, steps, exact and seconds."""
    cache = require_empty_cache()
    start = time.perf_counter()
    model, tokenizer = initial_model(train_cfg, task, "cpu")
    seconds = time.perf_counter() - start
    (report_file,) = (cache / "sft").glob("*/warm_start.json")
    report = json.loads(report_file.read_text())["report"]  # converged_at, steps, exact
    return model, tokenizer, {**report, "seconds": round(seconds)}


# --- the grid of train.py runs -------------------------------------------------------------

@dataclass
class ExperimentConfig:
    """Method x reuse x seed on the tiny Qwen3 models with the long-answer task."""

    models: list[str] = field(default_factory=lambda: ["tiny-qwen3", "tiny-qwen3-moe"])
    """Models to train (train.py --model)."""
    methods: list[str] = field(default_factory=lambda: ["respo_wtilt", "seq_clip", "grpo", "gspo", "vespo"])
    """Kernel methods (train.py --method); the first is the reference of the paired differences (respo_wtilt, the
    reconstruction, as the committed grids ran)."""
    settings: list[str] = field(default_factory=lambda: ["8", "4+lag2"])
    """Off-policy settings: R = reuse (train.py --reuse R), R+lagK = reuse R on rollouts K iterations stale (--lag K)."""
    lrs: list[str] = field(default_factory=list)
    """Per-method learning rates as method=lr (train.py --lr); a method not named gets train.py's default."""
    epochs: int = 2
    """Passes over each rollout batch (train.py --epochs; at most reuse), mini-batches = reuse / epochs."""
    seeds: list[int] = field(default_factory=lambda: list(range(8)))
    """Seeds; paired differences compare methods on the same seed."""
    iterations: int = 12
    """Rollout batches per run: the fixed budget every method gets."""
    prompts_per_iteration: int = 16
    """train.py --prompts-per-iteration: prompts per rollout batch (x 8 samples each)."""
    task: str = "reverse"
    """train.py --task (the long-answer task by default)."""
    task_size: int | None = None
    """train.py --task-size; None = the task's default."""
    sft_task_size: int | None = None
    """train.py --sft-task-size (digit_sum: the largest demonstrated target, fixed by gate 1); None = --task-size."""
    sft_full_share: float | None = None
    """train.py --sft-full-share (digit_sum, amendment 1: the share gate 1 fixed); None = train.py's default 0."""
    sft_steps: int | None = None
    """train.py --sft-steps; None = train.py's default."""
    eval_every: int = 12
    """train.py --eval-every: held-out evaluation period in iterations (always at the start and end)."""
    eval_problems: int = 64
    """train.py --eval-problems: held-out problems per evaluation (4 samples each)."""
    workers: int = 2
    """Runs in parallel, one torch thread each."""
    out_dir: str = "runs/experiments"
    """Where the runs are written."""
    figures: str | None = None
    """Where the learning-curve figures are written; None = <out_dir>/figures (the committed ones: research/figures/)."""
    records: str | None = None
    """Where the per-run records go (the records of models not run here are kept); None = <out_dir>/records.json."""
    stuck_below: float = 0.1
    """A run whose final training reward is below this counts as stuck (reported beside the means)."""
    report_only: bool = False
    """Only print the tables and write the figures of the runs found."""
    check: str | None = None
    """Reference records (a records.json) to compare these runs with, model by model, within 95% intervals."""
    claims: list[str] = field(default_factory=list)
    """Claims that must hold on these runs for every model, e.g. early_auc@8:respo_wtilt:above:seq_clip (exit 1 if not)."""

    def __post_init__(self):
        if self.iterations < 4:
            raise ValueError(f"iterations: need at least 4 for an early (first-quarter) AUC, got {self.iterations}")
        if self.workers < 1:
            raise ValueError(f"workers: must be >= 1, got {self.workers}")
        self.cells = [parse_setting(text) for text in self.settings]
        for reuse, _ in self.cells:
            reuse_split(reuse, self.epochs)
        self.lr_of = {}
        for item in self.lrs:
            method, _, value = item.partition("=")
            if method not in self.methods or not value:
                raise ValueError(f"lrs: expected method=lr for one of --methods, got {item!r}")
            self.lr_of[method] = float(value)
        self.figures = self.figures or str(Path(self.out_dir) / "figures")
        self.records = self.records or str(Path(self.out_dir) / "records.json")
        if self.check is not None and not Path(self.check).is_file():
            raise ValueError(f"check: no such records file {self.check!r}")
        if self.check is not None and Path(self.check).resolve() == Path(self.records).resolve():
            raise ValueError(f"records: a check writes its own records; --records must differ from {self.check!r}")
        for claim in self.claims:
            parse_claim(claim)

    def epochs_at(self, reuse: int) -> int:
        return reuse_split(reuse, self.epochs)[0]


def run_dir(cfg: ExperimentConfig, model: str, method: str, reuse: int, lag: int, seed: int) -> Path:
    return Path(cfg.out_dir) / model / f"{method}-reuse{reuse}{f'-lag{lag}' if lag else ''}-seed{seed}"


def finished(records: list[dict], iterations: int) -> bool:
    return any(r["kind"] == "eval" and r["iteration"] == iterations for r in records)


# The flags every committed record ran with where the defaults differ: each warm start trained from its settings
# (none shipped then), the padded training forward (--no-shared-prompts, today's default too) and the loss
# aggregation of the time (token-mean became the default with the published kernel). Every study but the reuse
# study passes them; AS_RECORDED_AGG is for the studies that build a LossConfig themselves. Those records also
# sampled with the old rollout.decode (--no-lean-sampler up to commit 9561567); no flag picks that loop since
# rollout.decode became the former lean sampler, so a run at HEAD draws other samples than its record
# (research/README.md, "Which commit each study's records ran on": a record is rerun at its commit).
AS_RECORDED = {"sft_from_scratch": True, "shared_prompts": False}
AS_RECORDED_AGG = "seq-mean-token-sum-norm"
AS_RECORDED_FLAGS = ["--sft-from-scratch", "--no-shared-prompts", "--agg", AS_RECORDED_AGG]


# How the studies launch train.py: as research.train, so that the study-only tasks and rows are registered.
TRAIN_ENTRY = [sys.executable, "-m", "research.train"]


def train_command(cfg: ExperimentConfig, model: str, method: str, reuse: int, lag: int, seed: int,
                  resume: bool) -> list[str]:
    path = run_dir(cfg, model, method, reuse, lag, seed)
    lr = ["--lr", str(cfg.lr_of[method])] if method in cfg.lr_of else []
    sizes = (("--task-size", cfg.task_size), ("--sft-task-size", cfg.sft_task_size),
             ("--sft-full-share", cfg.sft_full_share), ("--sft-steps", cfg.sft_steps))
    task = [item for flag, value in sizes if value is not None for item in (flag, str(value))]
    return [*TRAIN_ENTRY, "--model", model, "--task", cfg.task, *task, "--method", method,
            "--reuse", str(reuse), "--epochs", str(cfg.epochs_at(reuse)), "--lag", str(lag), *lr, "--seed", str(seed),
            "--iterations", str(cfg.iterations), "--prompts-per-iteration", str(cfg.prompts_per_iteration),
            "--eval-every", str(cfg.eval_every), "--eval-problems", str(cfg.eval_problems),
            "--out-dir", str(path.parent), "--name", path.name, "--no-plots", *AS_RECORDED_FLAGS,
            *(["--resume"] if resume else [])]


def grid(cfg: ExperimentConfig, model: str | None = None) -> list[tuple]:
    """(model, method, reuse, lag, seed) cells in seed-major order: a grid stopped halfway
    still holds whole seeds of every method and setting, which is what paired differences need.

    At reuse 1 and lag 0 every step is on-policy, where every method's gradient is the plain
    policy gradient (tests/derivations/test_kernel_derivations.py, family 1): the runs would be identical
    (up to learning rates), so only the first method runs there and stands for all.
    """
    return [(m, meth, r, lag, s) for m in ([model] if model else cfg.models) for s in cfg.seeds
            for r, lag in cfg.cells for meth in cfg.methods
            if r > 1 or lag > 0 or meth == cfg.methods[0]]


def run_grid(cfg: ExperimentConfig) -> None:
    from tqdm import tqdm

    cells = grid(cfg)
    todo = [c for c in cells if not finished(read_metrics(run_dir(cfg, *c)), cfg.iterations)]
    print(f"{len(cells) - len(todo)} of {len(cells)} runs already finished; running {len(todo)}")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}

    def launch(cell):
        path = run_dir(cfg, *cell)
        path.parent.mkdir(parents=True, exist_ok=True)
        command = train_command(cfg, *cell, resume=(path / "checkpoints").exists())
        with open(path.parent / f"{path.name}.log", "a") as log:
            return cell, subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode

    failures = []
    with ThreadPoolExecutor(cfg.workers) as pool, tqdm(total=len(todo), desc="runs", unit="run") as bar:
        for future in as_completed([pool.submit(launch, c) for c in todo]):
            cell, code = future.result()
            if code:
                failures.append((cell, code))
            bar.update()
    for cell, code in failures:
        print(f"run {run_dir(cfg, *cell)} failed with exit code {code}; see its .log beside it")


def record_of(path: Path, model: str, method: str, reuse: int, lag: int, seed: int) -> dict:
    """One run in research/lab/report.py's record format: curves, outcomes and off-policy diagnostics."""
    records = read_metrics(path)
    train = [r for r in records if r["kind"] == "train"]
    by_iteration = {r["iteration"]: r for r in train}
    curve = [by_iteration[i]["reward"] for i in sorted(by_iteration)]
    quarter, tail = max(1, len(curve) // 4), max(1, len(curve) // 10)
    off_policy = [r for r in train if (r["epoch"], r["minibatch"]) != (0, 0) or lag]
    evals = [r for r in records if r["kind"] == "eval"]

    def mean_of(key, rows):
        values = [r[key] for r in rows if r.get(key) is not None]
        return sum(values) / len(values) if values else float("nan")

    record = {"model": model, "method": method, "reuse": reuse, "lag": lag, "seed": seed,
              "lr": json.loads((path / "config.json").read_text())["lr"],
              "reward_curve": curve, "early_auc": sum(curve[:quarter]) / quarter, "full_auc": sum(curve) / len(curve),
              "final_reward": sum(curve[-tail:]) / tail, "skipped_steps": sum(r.get("skipped", 0) for r in train),
              # Sampled like the training reward: the warm start leaves greedy decoding right almost always.
              "heldout_reward": evals[-1]["heldout_pass@1"], "heldout_start": evals[0]["heldout_pass@1"],
              "heldout_greedy": evals[-1]["heldout_acc"],
              "zero_var_frac": mean_of("zero_var_frac", train), "response_length": mean_of("response_len", train),
              "final_entropy": train[-1].get("entropy", float("nan")), "grad_norm": mean_of("grad_norm", train),
              "tokens_per_s": mean_of("train_tokens_per_s", train)}
    # Off-policy steps only: without lag, at the first step of a batch every weight is 1 by construction.
    record.update({key: mean_of(key, off_policy) for key in DIAGNOSTIC_KEYS})
    return record
