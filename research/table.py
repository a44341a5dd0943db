"""The table study (research/TABLE.md): the paper's table compared where its drift is present, and where the deep
tail comes from. The reuse study's task, start, protocol and scale (`--protocol paper`, N in {8, 16, 32}, 256 updates
per run), the lr by a rule fixed in advance (the largest on-policy lr of the grid that collapses no selection run),
seven methods (the paper's four and a 2 x 2 of branches at the sequence level), 16 fresh paired seeds.

    NANO_RESPO_CACHE=runs/table-cache-default python -m research.table --stage all
    ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 NANO_RESPO_CACHE=runs/table-cache-unvectorised \\
        python -m research.table --stage all
    python -m research.table --summarise             # every check, contrast, verdict and table, in TABLE.md's order
    python -m research.table --summarise --seeds 10  # the declared cut, when compute ended before 16 seeds
    python -m research.table --stage evaluate --lr 0.0004 --only respo-N32-seed300 --out runs/table-rerun  # one run

Each command runs on its process's CPU setting, one record per run under <out>/<setting>/<stage>/<name>.json, in
TABLE.md's order: the lr stage (the default setting only: it decides for both; the other setting's process waits
for its records), then the cell seed-major (seed 300's every N and method, then 301, ...), so a stop leaves whole
seeds. A record that exists is kept (--only too), so a stopped command resumes where it stopped. A run is train.py's
own loop in-process (train.train with a watch on its step, research/responses.py): the record names the train.py
command (`python -m research.train ...`, with the study's rows registered), the commit it ran at, and the one
command that remakes it (its "command", which `python -m research.rerun RECORD --commit <its commit>` runs).
The rules and tables are research/table_rules.py's.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from nano_respo.kernel import sequence_log_weight
from nano_respo.summary import paper_summary
from research.cli import parse_config
from research.common import CPU_SETTING_VARIABLES, ROOT, provenance
from research.digit_runs import load, warm_start_report
from research.lab.records import write_record
from research.responses import ResponseReader, rollout_counts, watched_run
from research.reuse import host, per_update, train_argv
from research.table_rules import (DECIDING_SETTING, LR_GRID, LR_METHOD, METHODS, NS, SEEDS, SELECTION_SEEDS,
                                  SMALLEST_CUT, UPDATES, choose_lr, prefix_summary, run_name, shared_prefixes,
                                  summarise)
from train import TrainConfig

SCRIPT = "research.table"
STAGES = ("all", "lr", "evaluate")
PREFIX_KEYS = ("deep_n", "deep_sum", "other_n", "other_sum")


@dataclass
class TableConfig:
    """The table study on this CPU setting (TABLE.md), or every check, contrast and table of the records."""

    stage: str = "all"
    """all (the lr stage on the default setting, then the cell seed-major), or one of lr, evaluate."""
    lr: float | None = None
    """The cell's lr, or none for TABLE.md's rule on the default setting's lr records under --out (waiting for 12)."""
    seeds: int = len(SEEDS)
    """Seeds of the cell: the first K of 300-315, all 16 or a declared cut of at least 10 (what --summarise reads)."""
    out: str = "research/results/table"
    """Where the records go: <out>/<setting>/<stage>/<name>.json."""
    summarise: bool = False
    """Only print the checks, the contrasts, the verdicts, H, M and the tables from the records under --out."""
    only: str | None = None
    """Run only the record of this name in --stage (e.g. respo-N32-seed300, with --lr), if it is missing."""

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"stage: choose one of {', '.join(STAGES)}, got {self.stage!r}")
        if self.lr is not None and not self.lr > 0:
            raise ValueError(f"lr: must be > 0, got {self.lr}")
        if not SMALLEST_CUT <= self.seeds <= len(SEEDS):
            raise ValueError(f"seeds: between {SMALLEST_CUT} (TABLE.md's smallest cut) and {len(SEEDS)}, "
                             f"got {self.seeds}")
        if self.only is not None and (self.stage == "all" or (self.stage == "evaluate" and self.lr is None)):
            raise ValueError("only: name a run of one stage (--stage lr, or --stage evaluate with its --lr)")


def stage_runs(stage: str, lr: float | None, seeds: int) -> list[tuple[str, list[str]]]:
    """(name, train.py flags) of a stage's runs in TABLE.md's order: the lr grid x selection seeds on-policy
    (N = 1, respo standing for all); the cell seed-major, each seed's N = 8, 16, 32 with every method."""
    if stage == "lr":
        return [(f"{LR_METHOD}-lr{x:g}-seed{s}", train_argv(LR_METHOD, 1, s, x))
                for x in LR_GRID for s in SELECTION_SEEDS]
    return [(run_name(m, n, s), train_argv(m, n, s, lr)) for s in SEEDS[:seeds] for n in NS for m in METHODS]


def commit() -> dict:
    """The commit this process runs at, and whether its tracked files are as committed."""
    def git(*args):
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "tree_clean": status == "" if status is not None else None}


class TableReader(ResponseReader):
    """train.rl_step's watch: the response reader (with each response's applied coefficient), and at each step M's
    shared-prefix summary, W taken against the log-probs the run's loss read it against: batch.pi_old_logp when
    present, else batch.old_logp (under --protocol paper without lag train.py sets pi_old_logp = old_logp, so the
    two are the same tensor; `pi_old_is_mu` records that they were equal at every step)."""

    def __init__(self, group_size: int):
        super().__init__(own_phi=True)
        self.group_size = group_size
        self.prefix = []
        self.pi_old_is_mu = True

    def __call__(self, batch, logp: torch.Tensor, phi: torch.Tensor) -> None:
        super().__call__(batch, logp, phi)
        against = batch.old_logp if batch.pi_old_logp is None else batch.pi_old_logp
        self.pi_old_is_mu &= batch.pi_old_logp is None or torch.equal(batch.pi_old_logp, batch.old_logp)
        mask = batch.completion_mask
        log_w = sequence_log_weight(logp, against, mask)
        tokens = batch.input_ids[:, -mask.shape[1]:]
        self.prefix.append(prefix_summary(shared_prefixes(tokens.tolist(), mask.tolist(), batch.advantages.tolist(),
                                                          log_w.tolist(), self.group_size)))


def per_update_mass(rows: dict[str, list], updates: int) -> dict[str, list[float]]:
    """Per optimizer step: the positives' summed coefficient, and the deep-tail (log W < -1) positives'."""
    out = {"phi_pos": [0.0] * updates, "phi_deep_pos": [0.0] * updates}
    for step, advantage, length, log_w, phi in zip(rows["step"], rows["advantage"], rows["length"], rows["log_w"],
                                                   rows["phi"]):
        if advantage > 0 and length > 0:
            out["phi_pos"][step - 1] += phi
            out["phi_deep_pos"][step - 1] += phi * (log_w < -1.0)
    return out


def train_command(flags: list[str]) -> str:
    """The run as a train.py command: its CPU variables, then python -m research.train (train.py with the study's
    task and rows registered; `python train.py` does not know digit_conflict)."""
    prefix = " ".join(f"{k}={os.environ[k]}" for k in CPU_SETTING_VARIABLES if os.environ.get(k))
    return " ".join(filter(None, [prefix, "python -m research.train", shlex.join(flags)]))


def run_record(name: str, stage: str, lr: float | None, flags: list[str], invoked_as: list[str] | None) -> dict:
    """One run, read: the command that remakes this record alone, the commit and host, the train.py command, the
    per-update score, tails, coefficient mass and shared prefixes, the paper's summaries, the rollout counts per
    batch (the pairing check) and held-out pass@1 at the end."""
    cfg = parse_config(TrainConfig, flags)
    start = time.perf_counter()
    reader = TableReader(cfg.group_size)
    records, watched, tokenizer = watched_run(cfg, reader)
    rows = reader.rows(tokenizer, watched)
    train = [r for r in records if r["kind"] == "train"]
    updates = len(train)
    prefix = {key: [0] * updates for key in PREFIX_KEYS}
    for summary, record in zip(reader.prefix, watched):
        for key in PREFIX_KEYS:
            prefix[key][record["step"] - 1] = summary[key]
    again = ["--stage", stage, *(["--lr", f"{lr:g}"] if stage == "evaluate" else []), "--only", name]
    return {**provenance(SCRIPT, again, empty_cache=False), **commit(), "host": host(),
            "config": {"invoked_as": provenance(SCRIPT, invoked_as, empty_cache=False)["command"]},
            "train_command": train_command(flags), "method": cfg.loss.method, "n": cfg.reuse, "lr": cfg.lr,
            "seed": cfg.seed, "updates": updates, "warm_start": warm_start_report(),
            "score": [r["reward"] for r in train], "skipped_steps": sum(r["skipped"] for r in train),
            "deep_low_w_pos_frac": [r.get("deep_low_w_pos_frac") for r in train],
            "deep_low_w_pos_phi_mass": [r.get("deep_low_w_pos_phi_mass") for r in train],
            **per_update(rows), **per_update_mass(rows, updates), "prefix": prefix,
            "pi_old_is_mu": reader.pi_old_is_mu, "summary": paper_summary(train, UPDATES),
            "rollouts": rollout_counts(rows, train),
            "heldout": {k: v for k, v in next(r for r in reversed(records) if r["kind"] == "eval").items()
                        if k.startswith("heldout")},
            "seconds": round(time.perf_counter() - start), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}


def setting() -> str:
    return provenance(SCRIPT)["cpu_setting"]


def run_stage(cfg: TableConfig, stage: str, lr: float | None, argv) -> None:
    """Each run of the stage whose record is missing, in order: a killed process loses at most the run in flight."""
    runs = [(n, f) for n, f in stage_runs(stage, lr, cfg.seeds) if cfg.only in (None, n)]
    if not runs:
        raise SystemExit(f"only: {cfg.only!r} is no run of --stage {stage}")
    where = ROOT / cfg.out / setting() / stage
    todo = [(n, f) for n, f in runs if not (where / f"{n}.json").exists()]
    print(f"{len(runs) - len(todo)} of {len(runs)} records of {stage} ({setting()}) exist; running {len(todo)}",
          flush=True)
    if todo and not commit()["tree_clean"]:
        print("note: tracked files differ from the commit; the records say so (tree_clean: false)", flush=True)
    torch.set_num_threads(1)
    for index, (name, flags) in enumerate(todo, 1):
        record = run_record(name, stage, lr, flags, argv)
        write_record(record, str(where / f"{name}.json"))
        s = record["summary"]
        print(f"[{index}/{len(todo)}] {name}: early {s['early']:.3f}, late {s['late']:.3f}; {record['seconds']} s",
              flush=True)


def decided_lr(cfg: TableConfig) -> float:
    """The cell's lr: given, or TABLE.md's rule on the default setting's lr records under --out (waiting for all)."""
    if cfg.lr:
        return cfg.lr
    while True:
        records = load(ROOT / cfg.out).get((DECIDING_SETTING, "lr"), [])
        lr, table = choose_lr(records)
        if len(records) == len(LR_GRID) * len(SELECTION_SEEDS):
            break
        print(f"waiting for the {DECIDING_SETTING} setting's lr stage ({len(records)} of "
              f"{len(LR_GRID) * len(SELECTION_SEEDS)} records)", flush=True)
        time.sleep(60)
    if lr is None:
        raise SystemExit(f"{table}\nthe smallest lr collapsed a selection run: by TABLE.md the study stops here")
    print(f"{table}\nthe cell's lr = {lr:g} (the {DECIDING_SETTING} setting's lr stage decides)", flush=True)
    return lr


def main(argv=None) -> None:
    cfg = parse_config(TableConfig, argv, prog="python -m research.table")
    if cfg.summarise:
        print(summarise(ROOT / cfg.out, cfg.seeds))
        return
    if cfg.stage in ("all", "lr"):
        if setting() == DECIDING_SETTING:
            run_stage(cfg, "lr", None, argv)
        else:
            print(f"the lr stage runs on the {DECIDING_SETTING} setting only (TABLE.md); {setting()} skips it",
                  flush=True)
    if cfg.stage in ("all", "evaluate"):
        run_stage(cfg, "evaluate", decided_lr(cfg), argv)
        print("done: python -m research.table --summarise", flush=True)


if __name__ == "__main__":
    main()
