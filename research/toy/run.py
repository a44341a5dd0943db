"""Compare methods on a toy environment across rollout-reuse factors and seeds.

    python -m research.toy.run --env seq --methods respo seq_clip grpo gspo cispo vespo --reuse 1 4 8 16 --seeds 0 1 2

Runs go to worker processes (--workers), each finished run is appended to
<out>/runs.jsonl at once (a rerun with the same settings skips what is there), and the end
prints and writes <out>/table.md and the plots rewards.png, phi.png, low_w.png.

--check <reference runs.jsonl or folder> compares these runs with committed ones within 95%
intervals (exact digits do not travel between CPUs) and --claims states what must still hold;
the exit status is 1 when the check fails. --out must then be a folder of its own.

Two ReSPO kernels run here: `respo`, the published one (its knobs --alpha-pos ... --lambda-neg, LossConfig's
defaults unless given), and `respo_wtilt`, this project's reconstruction (--wtilt-alpha-pos ...), which every
committed toy record ran. Each record's `loss` names every knob of its kernel. The paired differences subtract the
others from the first method. The loss aggregation is TOY_AGG unless --agg names another (as every committed record ran;
--agg token-mean is LossConfig's default and the paper's).
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from multiprocessing import get_context

from tqdm import tqdm

from research.cli import parse_config
from nano_respo.kernel import AGG_MODES, METHOD_TABLE, SCALES, LossConfig, reuse_split
from toy.envs import ENVS
from research.study_rows import StudyLossConfig
from research.lab.report import (check_report, claims_table, diagnostics_table, load_records, outcome_table, paired_table,
                               parse_claim, plot_low_w, plot_phi, plot_rewards)
from toy.train import Job, RunSettings

# The loss aggregation every committed toy record ran with (LossConfig's default then; token-mean is today's).
TOY_AGG = "seq-mean-token-sum-norm"

# The kernel knobs of each ReSPO method, in the order a record and research.toy.select's grid give them.
KNOBS = {"respo": ("alpha_pos", "beta_pos", "lambda_pos", "alpha_neg", "beta_neg", "lambda_neg"),
         "respo_wtilt": ("wtilt_alpha_pos", "wtilt_lambda_pos", "wtilt_alpha_neg", "wtilt_lambda_neg")}
EXAMPLES = """\
examples:
  python -m research.toy.run --methods respo seq_clip --reuse 8 --seeds 0 1 2 --out runs/toy-check --workers 2
  python -m research.toy.run --env bandit --methods respo grpo --reuse 1 4 --seeds 0 --out runs/toy-bandit
  python -m research.toy.run --methods respo_wtilt seq_clip --reuse 8 --seeds $(seq 200 219) --lrs respo_wtilt=0.03 seq_clip=0.003 --out runs/toy-check --check research/toy/results/eval-fresh-default --claims early_auc@8:respo_wtilt:above:seq_clip

The committed evaluation command is in research/toy/README.md."""


@dataclass
class RunConfig(RunSettings):
    """Toy comparison of policy losses under rollout reuse (every update calls kernel.policy_loss)."""

    env: str = "seq"
    """Environment: seq (digit-sum sequence bandit, MLP policy) or bandit (factorised K-armed, tabular)."""
    methods: list[str] = field(default_factory=lambda: ["respo", "seq_clip", "grpo", "gspo", "cispo", "vespo"])
    """Methods to compare (policy losses of nano_respo.kernel; docs/math.md §5)."""
    reuse: list[int] = field(default_factory=lambda: [1, 4, 8, 16])
    """Rollout reuse factors R: optimizer steps per rollout batch."""
    seeds: list[int] = field(default_factory=lambda: [100, 101, 102, 103, 104])
    """Seeds; each (method, R) pair runs on every seed, so differences can be paired."""
    lr: float = 0.01
    """Adam learning rate of every method not named in --lrs."""
    lrs: list[str] = field(default_factory=list)
    """Per-method learning rates as method=lr, e.g. respo=0.01 grpo=0.03."""
    alpha_pos: float | None = None
    """respo, positive branch: power-mean order alpha_+; default: LossConfig's (docs/math.md §3)."""
    beta_pos: float | None = None
    """respo, positive branch: weight beta_+ of W; default: LossConfig's."""
    lambda_pos: float | None = None
    """respo, positive branch: tilt lambda_+; default: LossConfig's."""
    alpha_neg: float | None = None
    """respo, negative branch: power-mean order alpha_-; default: LossConfig's."""
    beta_neg: float | None = None
    """respo, negative branch: weight beta_- of W; default: LossConfig's."""
    lambda_neg: float | None = None
    """respo, negative branch: tilt lambda_-; default: LossConfig's."""
    wtilt_alpha_pos: float | None = None
    """respo_wtilt (the reconstruction), positive power; default: LossConfig's wtilt_alpha_pos."""
    wtilt_lambda_pos: float | None = None
    """respo_wtilt, positive tilt; default: LossConfig's wtilt_lambda_pos."""
    wtilt_alpha_neg: float | None = None
    """respo_wtilt, negative power; default: LossConfig's wtilt_alpha_neg."""
    wtilt_lambda_neg: float | None = None
    """respo_wtilt, negative tilt; default: LossConfig's wtilt_lambda_neg."""
    agg: str = TOY_AGG
    """Loss aggregation of every method: TOY_AGG (as every committed record ran), or
    e.g. token-mean, LossConfig's and the paper's; named in each record's `loss`."""
    stuck_below: float = 0.1
    """A seed counts as stuck when its final training reward is below this."""
    workers: int = 1
    """Parallel worker processes (1 = run in this process)."""
    threads: int = 1
    """torch threads per process."""
    out: str = "runs/toy"
    """Folder for runs.jsonl, table.md and the plots (never the committed research/toy/figures)."""
    skip_silent_steps: bool = False
    """Take no optimizer step on a mini-batch whose advantages are all 0 (research/toy/stuck.py: Adam's momentum on its own)."""
    check: str | None = None
    """Reference records (a runs.jsonl or its folder) to compare these runs with, cell by cell, within 95% intervals."""
    claims: list[str] = field(default_factory=list)
    """Claims that must hold on these runs, e.g. early_auc@8:respo_wtilt:above:seq_clip (its paired 95% interval lies above 0)."""

    def __post_init__(self):
        if self.env not in ENVS:
            raise ValueError(f"env: unknown environment {self.env!r}; choose one of {', '.join(ENVS)}")
        for method in self.methods:
            if method not in METHOD_TABLE:
                raise ValueError(f"methods: unknown method {method!r}; choose from {', '.join(METHOD_TABLE)}")
        for reuse in self.reuse:
            if reuse < 1:
                raise ValueError(f"reuse: every R must be >= 1, got {reuse}")
            reuse_split(reuse, minibatches=self.minibatches)
        if self.prompts_per_batch % self.minibatches:
            raise ValueError(f"prompts_per_batch: {self.prompts_per_batch} must be a multiple of minibatches={self.minibatches}")
        if self.agg not in AGG_MODES:
            raise ValueError(f"agg: choose one of {', '.join(AGG_MODES)}, got {self.agg!r}")
        if self.adv_scale not in SCALES:
            raise ValueError(f"adv_scale: choose one of {', '.join(SCALES)}, got {self.adv_scale!r}")
        if self.workers < 1 or self.threads < 1:
            raise ValueError("workers: and threads must be >= 1")
        for claim in self.claims:
            parse_claim(claim)
        if self.check is not None:
            reference = self.check if os.path.isdir(self.check) else os.path.dirname(self.check) or "."
            if not os.path.exists(self.check):
                raise ValueError(f"check: no such records {self.check!r}")
            if os.path.realpath(reference) == os.path.realpath(self.out):
                raise ValueError(f"out: a check recomputes into its own folder; --out must differ from {reference!r}")
        self.lr_of = {}
        for item in self.lrs:
            method, _, value = item.partition("=")
            if method not in METHOD_TABLE or not value:
                raise ValueError(f"lrs: expected method=lr with a known method, got {item!r}")
            self.lr_of[method] = float(value)

    def kernel_overrides(self, method: str) -> dict:
        """Every knob of the method's kernel (KNOBS; none for other methods), resolved against LossConfig, so every
        record names its kernel."""
        defaults = StudyLossConfig()
        return {k: getattr(defaults, k) if getattr(self, k) is None else getattr(self, k) for k in KNOBS.get(method, ())}

    def jobs(self) -> list[Job]:
        shared = {f.name: getattr(self, f.name) for f in fields(RunSettings)}
        return [Job(env=self.env, method=method, reuse=reuse, seed=seed, lr=self.lr_of.get(method, self.lr),
                    loss=self.kernel_overrides(method) | {"agg": self.agg}, **shared)
                for reuse in self.reuse for method in self.methods for seed in self.seeds]


def init_worker(threads: int):
    import torch

    torch.set_num_threads(threads)


def run_one(job: Job, skip_silent_steps: bool = False) -> dict:
    from toy.train import train

    return train(job, skip_silent_steps=skip_silent_steps, config_class=StudyLossConfig)


def job_id(job: Job, skip_silent_steps: bool = False) -> str:
    return json.dumps(asdict(job), sort_keys=True) + (" skip_silent_steps" if skip_silent_steps else "")


def worker_pool(workers: int, threads: int = 1) -> ProcessPoolExecutor:
    """`workers` spawned processes, each with `threads` torch threads, for run_jobs."""
    return ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=init_worker, initargs=(threads,))


def run_jobs(jobs: list[Job], out: str, workers: int = 1, threads: int = 1, desc: str = "runs",
             skip_silent_steps: bool = False, pool: ProcessPoolExecutor | None = None) -> list[dict]:
    """Run what <out>/runs.jsonl does not hold yet; append each record the moment it is done. With workers > 1 the
    runs go to `pool` (a worker_pool(workers, threads) a caller keeps for several calls), or to a pool of their own."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "runs.jsonl")
    held = [p for p in (path, path + ".gz") if os.path.exists(p)]
    done = {record["job_id"]: record for record in load_records(out)} if held else {}
    todo = [job for job in jobs if job_id(job, skip_silent_steps) not in done]

    def keep(job, record):
        record["job_id"] = job_id(job, skip_silent_steps)
        done[record["job_id"]] = record
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")

    with tqdm(total=len(todo), desc=desc, unit="run") as bar:
        if workers == 1:
            init_worker(threads)
            for job in todo:
                keep(job, run_one(job, skip_silent_steps))
                bar.update()
        else:
            with (nullcontext(pool) if pool is not None else worker_pool(workers, threads)) as runner:
                futures = {runner.submit(run_one, job, skip_silent_steps): job for job in todo}
                for future in as_completed(futures):
                    keep(futures[future], future.result())
                    bar.update()
    return [done[job_id(job, skip_silent_steps)] for job in jobs]


def report(cfg: RunConfig, records: list[dict]) -> str:
    text = "\n\n".join([
        f"## Outcomes ({cfg.env}; mean ± 95% CI over seeds; stuck = final training reward < {cfg.stuck_below})",
        outcome_table(records, cfg.stuck_below),
        "## Paired differences (same seeds)",
        paired_table(records, reference=cfg.methods[0]),
        "## Diagnostics (docs/math.md §6; run means over optimizer steps, then over seeds)",
        diagnostics_table(records),
    ])
    with open(os.path.join(cfg.out, "table.md"), "w") as f:
        f.write(text + "\n")
    plot_rewards(records, os.path.join(cfg.out, "rewards.png"), title=f"{cfg.env}: training reward")
    plot_phi(cfg.methods, os.path.join(cfg.out, "phi.png"), {m: cfg.kernel_overrides(m) for m in cfg.methods})
    plot_low_w(records, os.path.join(cfg.out, "low_w.png"))
    return text


def main(argv=None):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cfg = parse_config(RunConfig, argv, prog="python -m research.toy.run", epilog=EXAMPLES)
    records = run_jobs(cfg.jobs(), cfg.out, cfg.workers, cfg.threads, skip_silent_steps=cfg.skip_silent_steps)
    print(report(cfg, records))
    print(f"\nwrote {cfg.out}/table.md, rewards.png, phi.png, low_w.png")
    if cfg.check or cfg.claims:
        if not check(cfg, records):
            sys.exit(1)


def check(cfg: RunConfig, records: list[dict]) -> bool:
    """Judge these runs against --check's records and --claims; writes <out>/check.md."""
    if cfg.check:
        text, passed = check_report(load_records(cfg.check), records, cfg.claims, cfg.stuck_below)
    else:
        table, passed = claims_table(cfg.claims, {"these runs": records})
        text = f"## Claims\n\n{table}\n\n" + ("CHECK PASSED" if passed else "CHECK FAILED: a claim does not hold")
    with open(os.path.join(cfg.out, "check.md"), "w") as f:
        f.write(text + "\n")
    print("\n" + text + f"\n\nwrote {cfg.out}/check.md")
    return passed


if __name__ == "__main__":
    main()
