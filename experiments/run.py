"""ReSPO against clipping under rollout reuse and staleness on the tiny Qwen3, dense and MoE.

    python experiments/run.py                                  # the whole grid, resumable
    python experiments/run.py --models tiny-qwen3 --methods respo grpo --settings 8 --seeds 0   # one cell
    python experiments/run.py --settings 4 8 4+lag2 --lrs respo=1e-3 seq_clip=3e-4   # reuse, staleness, own lrs
    python experiments/run.py --report-only                    # tables and figures of the runs so far
    python experiments/run.py ... --check experiments/results/default/records.json --claims early_auc@8:respo:above:seq_clip
                                                               # a rerun judged against committed records

Every run is one `python train.py` with a fixed budget of rollout batches (--iterations),
written to <out-dir>/<model>/<method>-reuse<R>[-lag<K>]-seed<S>/; the records and figures go to
<out-dir> too unless --records / --figures name other places (the committed ones live in
experiments/results/ and experiments/figures/). A finished run (its last eval line
at the final iteration) is skipped; an unfinished one is resumed from its checkpoint, so the
grid runs in chunks: stop it any time and start it again. Runs go to `--workers` parallel
processes of one torch thread each. The tables (means with 95% CIs over seeds, paired
ReSPO-minus-baseline differences on the same seeds, low-w diagnostics) come from
nano_respo/lab/report.py, the same code that reports the toy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout, no install

from nano_respo.run.cli import parse_config  # noqa: E402
from nano_respo.kernel import DIAGNOSTIC_KEYS, reuse_split  # noqa: E402
from nano_respo.run.metrics import read_metrics  # noqa: E402
from nano_respo.lab.report import (check_report, claims_table, diagnostics_table, outcome_table,  # noqa: E402
                               paired_table, parse_claim, parse_setting, plot_rewards)


@dataclass
class ExperimentConfig:
    """Method x reuse x seed on the tiny Qwen3 models with the long-answer task."""

    models: list[str] = field(default_factory=lambda: ["tiny-qwen3", "tiny-qwen3-moe"])
    """Models to train (train.py --model)."""
    methods: list[str] = field(default_factory=lambda: ["respo", "seq_clip", "grpo", "gspo", "vespo"])
    """Kernel methods (train.py --method); the first is the reference of the paired differences."""
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
    """Where the learning-curve figures are written; None = <out_dir>/figures (the committed ones: experiments/figures/)."""
    records: str | None = None
    """Where the per-run records go (the records of models not run here are kept); None = <out_dir>/records.json."""
    stuck_below: float = 0.1
    """A run whose final training reward is below this counts as stuck (reported beside the means)."""
    report_only: bool = False
    """Only print the tables and write the figures of the runs found."""
    check: str | None = None
    """Reference records (a records.json) to compare these runs with, model by model, within 95% intervals."""
    claims: list[str] = field(default_factory=list)
    """Claims that must hold on these runs for every model, e.g. early_auc@8:respo:above:seq_clip (exit 1 if not)."""

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


def train_command(cfg: ExperimentConfig, model: str, method: str, reuse: int, lag: int, seed: int,
                  resume: bool) -> list[str]:
    path = run_dir(cfg, model, method, reuse, lag, seed)
    lr = ["--lr", str(cfg.lr_of[method])] if method in cfg.lr_of else []
    sizes = (("--task-size", cfg.task_size), ("--sft-task-size", cfg.sft_task_size),
             ("--sft-full-share", cfg.sft_full_share), ("--sft-steps", cfg.sft_steps))
    task = [item for flag, value in sizes if value is not None for item in (flag, str(value))]
    return [sys.executable, str(ROOT / "train.py"), "--model", model, "--task", cfg.task, *task, "--method", method,
            "--reuse", str(reuse), "--epochs", str(cfg.epochs_at(reuse)), "--lag", str(lag), *lr, "--seed", str(seed),
            "--iterations", str(cfg.iterations), "--prompts-per-iteration", str(cfg.prompts_per_iteration),
            "--eval-every", str(cfg.eval_every), "--eval-problems", str(cfg.eval_problems),
            "--out-dir", str(path.parent), "--name", path.name, "--no-plots", *(["--resume"] if resume else [])]


def grid(cfg: ExperimentConfig, model: str | None = None) -> list[tuple]:
    """(model, method, reuse, lag, seed) cells in seed-major order: a grid stopped halfway
    still holds whole seeds of every method and setting, which is what paired differences need.

    At reuse 1 and lag 0 every step is on-policy, where every method's gradient is the plain
    policy gradient (tests/test_kernel_derivations.py, family 1): the runs would be identical
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
            return cell, subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode

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
    """One run in nano_respo/lab/report.py's record format: curves, outcomes and off-policy diagnostics."""
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


def write_records(path: Path, models: list[str], records: list[dict]) -> None:
    """Replace these models' records in the file, keeping the others': one file can hold every model."""
    kept = [r for r in json.loads(path.read_text()) if r["model"] not in models] if path.exists() else []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept + records, indent=0))


def report(cfg: ExperimentConfig) -> str:
    sections, everything = [], []
    for model in cfg.models:
        cells = grid(cfg, model)
        records = [record_of(run_dir(cfg, *c), *c) for c in cells
                   if finished(read_metrics(run_dir(cfg, *c)), cfg.iterations)]
        if not records:
            continue
        everything += records
        Path(cfg.figures).mkdir(parents=True, exist_ok=True)
        figure = Path(cfg.figures) / f"{model}-reward.png"
        plot_rewards(records, str(figure), title=f"{model}: training reward per rollout batch")
        sections += [f"## {model} ({len(records)} of {len(cells)} runs finished)", "",
                     f"![reward curves]({figure.relative_to(Path(cfg.figures).parent)})", "",
                     outcome_table(records, cfg.stuck_below), "",
                     paired_table(records, reference=cfg.methods[0]), "",
                     diagnostics_table(records), ""]
    if everything:
        write_records(Path(cfg.records), cfg.models, everything)
    return "\n".join(sections) or "no finished runs yet"


def check(cfg: ExperimentConfig) -> bool:
    """These runs against --check's records and --claims, model by model; writes <out_dir>/check.md."""
    records = json.loads(Path(cfg.records).read_text()) if Path(cfg.records).exists() else []
    reference = json.loads(Path(cfg.check).read_text()) if cfg.check else []
    parts, passed = [], True
    for model in cfg.models:
        mine = [r for r in records if r["model"] == model]
        if cfg.check:
            text, holds = check_report([r for r in reference if r["model"] == model], mine, cfg.claims,
                                       cfg.stuck_below)
        else:
            text, holds = claims_table(cfg.claims, {"these runs": mine})
        parts.append(f"# {model}\n\n{text}")
        passed = passed and holds
    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.out_dir) / "check.md").write_text("\n\n".join(parts) + "\n")
    print("\n" + "\n\n".join(parts) + f"\n\nwrote {Path(cfg.out_dir) / 'check.md'}")
    return passed


def main(argv=None):
    cfg = parse_config(ExperimentConfig, argv)
    if not cfg.report_only:
        run_grid(cfg)
    print(report(cfg))
    if (cfg.check or cfg.claims) and not check(cfg):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
