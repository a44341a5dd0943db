"""The mechanism on a real transformer (research/MECHANISM.md): digit_conflict, its gates, then the decision.

    NANO_RESPO_CACHE=<new empty dir> python -m research.conflict --stage gate1 --sft-full-share 0.02
    NANO_RESPO_CACHE=<that dir> python -m research.conflict --stage lr --sft-full-share 0.02
    NANO_RESPO_CACHE=<that dir> python -m research.conflict --stage gate-a --sft-full-share 0.02 --lr 3e-4
    python -m research.conflict --summarise            # every table, the verdicts and the figures

Its evaluation never ran: gate A failed at lags 4 and 8 (MECHANISM.md, Outcome), so by its rule nothing was
compared, and the stage is not offered. The study that compares the methods on this task is research/drift.py.

Each stage runs on this process's CPU setting (the default kernels, or ATEN_CPU_CAPABILITY=default
MKL_ENABLE_INSTRUCTIONS=SSE4_2 in front of the command) and writes one record per run to
<out>/<setting>/<stage>/; a record that exists is kept unless --overwrite. gate1 trains the warm start into an
empty cache (`--sft-task-size 11 --sft-full-share q`: random `sum` decompositions, a share q of draws from the
whole task) and samples every target; the other stages start every run from that cached warm start. A run is
train.py's loop in-process (research/responses.py), read step by step: its record keeps the rollout counts
per family and target, the held-out `ones` pass@1 at the end, and, pooled over the steps of batches 1 on (each
on-policy step left out), per family and response length the sums from which the gates' statistics, what each
tail loses and every method's retained signal are read (conflict_report.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from research.common import AS_RECORDED, AS_RECORDED_AGG, ROOT, provenance
from research.conflict_report import LAG, READ_METHODS
from research.digit_runs import (EARLY_BATCHES, GROUP, LR_GRID, MAX_NEW_TOKENS, MODEL, PROMPTS, SELECTION_SEEDS,
                                    SFT_STEPS, SFT_TASK_SIZE, gate1, run_all, run_record)
from train import TrainConfig
from nano_respo.cli import from_flat
from nano_respo.kernel import LossConfig
from research.cli import parse_config

STAGES = ("gate1", "lr", "gate-a")
SCRIPT = "research.conflict"


@dataclass
class ConflictConfig:
    """One stage of the digit_conflict study on this CPU setting, or the tables of every committed record."""

    stage: str = "gate1"
    """gate1 (warm start from an empty cache, every target sampled), lr (lr*, on-policy), gate-a (the manipulation
    check and its control)."""
    sft_full_share: float = 0.02
    """train.py --sft-full-share: the share of warm-start draws from the whole task (gate 1's rung)."""
    lr: float | None = None
    """lr* (gate-a), from the lr stage."""
    lag: int = LAG
    """The evaluation cell's lag (gate-a); gate A's fallback is 8."""
    seeds: list[int] | None = None
    """Seeds of the stage; None = the selection seeds."""
    samples: int = 32
    """gate1: completions per target and seed, at temperature 1."""
    out: str = "research/results/conflict"
    """Where the records go: <out>/<setting>/<stage>/<run>.json."""
    overwrite: bool = False
    """Run again and replace a record that exists."""
    summarise: bool = False
    """Only print every table and verdict from the records under --out, and draw the figures."""
    figures: str = "research/figures"
    """Where --summarise draws the learning curves per family (conflict-gate-a-curves.png, conflict-curves.png)."""

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"stage: choose one of {', '.join(STAGES)}, got {self.stage!r}")
        if self.stage == "gate-a" and not self.summarise and not (self.lr and self.lr > 0):
            raise ValueError("lr: pass lr* (> 0) from the lr stage")
        if self.lag < 1:
            raise ValueError(f"lag: the evaluation cell is stale, >= 1, got {self.lag}")
        if self.seeds is None:
            self.seeds = list(SELECTION_SEEDS)


def train_config(cfg: ConflictConfig, method: str, reuse: int, lag: int, seed: int, lr: float,
                 sampler_dtype: str = "float32") -> TrainConfig:
    """One run of the study: the lag's batches, then EARLY_BATCHES whose sampler has moved. Its aggregation is the
    one the study ran under (the default of the time), 2 epochs x 2 mini-batches at R = 4."""
    return from_flat(TrainConfig, dict(model=MODEL, task="digit_conflict", sft_task_size=SFT_TASK_SIZE,
                                       sft_full_share=cfg.sft_full_share, sft_steps=SFT_STEPS,
                                       max_new_tokens=MAX_NEW_TOKENS,
                                       loss=LossConfig(method=method, agg=AS_RECORDED_AGG), reuse=reuse,
                                       epochs=min(2, reuse), lag=lag, sampler_dtype=sampler_dtype, lr=lr, seed=seed,
                                       iterations=cfg.lag + 1 + EARLY_BATCHES, prompts_per_iteration=PROMPTS,
                                       group_size=GROUP, eval_problems=24, eval_samples=8, plots=False, **AS_RECORDED))


def run_name(train_cfg: TrainConfig) -> str:
    method = train_cfg.loss.method
    dtype = "" if train_cfg.sampler_dtype == "float32" else f"-{train_cfg.sampler_dtype}"
    lag = f"-lag{train_cfg.lag}" if train_cfg.lag else ""
    # A lag implies its run's length; an unlagged run (a control, an anchor) of the fallback's length is named so.
    batches = "" if train_cfg.iterations == (train_cfg.lag or LAG) + 1 + EARLY_BATCHES else f"-{train_cfg.iterations}batches"
    return f"{method}-lr{train_cfg.lr:g}-reuse{train_cfg.reuse}{lag}{dtype}{batches}-seed{train_cfg.seed}"


# --- the stages -------------------------------------------------------------------------------------

def stage_gate1(cfg: ConflictConfig, argv) -> dict:
    """The warm start from an empty cache, then every target of both families sampled on each selection seed."""
    train_cfg = train_config(cfg, "respo_wtilt", 1, 0, 0, 1e-4)
    setting = provenance(SCRIPT)["cpu_setting"]
    return gate1(train_cfg, cfg.seeds, cfg.samples, ROOT / cfg.out / setting / "gate1" / f"share{cfg.sft_full_share:g}.json",
                 SCRIPT, argv, asdict(cfg))


def stage_runs(cfg: ConflictConfig) -> list[tuple[str, TrainConfig]]:
    """The runs of the stage."""
    if cfg.stage == "lr":  # on-policy, where every kernel takes the same step: the then-respo stands for all
        return [(run_name(c), c) for lr in LR_GRID for s in cfg.seeds
                for c in [train_config(cfg, "respo_wtilt", 1, 0, s, lr)]]
    # gate-a: the cell under the sequence clip, and its control: the bf16 sampler's spread alone
    return [(run_name(c), c) for s in cfg.seeds for c in
            (train_config(cfg, "seq_clip", 4, cfg.lag, s, cfg.lr),
             train_config(cfg, "seq_clip", 1, 0, s, cfg.lr, sampler_dtype="bfloat16"))]


def main(argv=None) -> None:
    cfg = parse_config(ConflictConfig, argv, prog="python -m research.conflict")
    if cfg.summarise:
        from research.conflict_report import summarise
        print(summarise(ROOT / cfg.out, ROOT / cfg.figures))
        return
    if cfg.stage == "gate1":
        stage_gate1(cfg, argv)
    else:
        setting = provenance(SCRIPT)["cpu_setting"]
        run_all(ROOT / cfg.out / setting / cfg.stage, stage_runs(cfg),
                lambda train_cfg: run_record(train_cfg, SCRIPT, argv, READ_METHODS),
                f"{cfg.stage} ({setting})", cfg.overwrite)


if __name__ == "__main__":
    main()
