"""The three sources of off-policy data, separately and together, on the tiny Qwen3 (dense and MoE).

    python -m research.offpolicy                               # the pre-registered study (research/OFFPOLICY.md)
    python -m research.offpolicy --models tiny-qwen3 --sources mismatch --arms respo_wtilt --seeds 0   # one cell
    python -m research.offpolicy --summarise                   # the tables, from the committed records

A source is a way of making mu, pi_old and pi differ (docs/math.md §7): `mismatch` samples with
a bfloat16 copy of the learner at R = 1 (mu != pi_old), `reuse` takes R = 8 steps on each batch
with an fp32 sampler (pi != pi_old), `staleness` samples with weights --lag iterations old at
R = 1 (pi_old drifts from mu over iterations), `all` does the three at once. An arm is a method
with its correction (the losses users compare: TRL's and verl's rollout corrections, DeepSeek's
off-policy mask, VESPO's recipe).

Each run is train.py's own loop, `train.train`, in-process in a temporary run directory (its held-out
evaluations are not read: the reward read is the rollout batches'). Every optimizer step's mini-batch, with the
log-probs the loss saw (train.rl_step's `watch`), is also read by every arm's coefficient (as
research/notebooks/tiny_qwen3_records reads one batch): what each method and correction gives the same drifted
responses, at no extra forward. One JSON record per run goes to
<out>/<setting>/<model>/<source>/<arm>-seed<S>.json; an existing record is kept (the run is
skipped) unless --overwrite. <setting> names the CPU kernels: "scalar" under
ATEN_CPU_CAPABILITY=default, else "avx2".

The committed records were made before the published kernel became `respo`: their ReSPO arm is the
reconstruction, `respo_wtilt`, and every arm keeps the aggregation of the time (AS_RECORDED_AGG,
`seq-mean-token-sum-norm`; VESPO's recipe its own token-mean), as does the scale every coefficient is read at.
Two epochs where a source reuses (min(2, R)) are set in train_config.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from nano_respo.kernel import (LossConfig, coefficients, correction_log_ratio, decoupled_coefficients,
                               effective_sample_share, loss_denominator, off_policy_sequence_mask, outside_bounds,
                               sequence_log_weight)
from research.cli import parse_config
from research.common import AS_RECORDED, AS_RECORDED_AGG, ROOT
from research.responses import watched_run

# mu, pi_old, pi made to differ one way at a time (docs/math.md §7), sizes fixed by research/OFFPOLICY.md.
SOURCES = {
    "mismatch": {"sampler_dtype": "bfloat16", "reuse": 1, "lag": 0},
    "reuse": {"sampler_dtype": "float32", "reuse": 8, "lag": 0},
    "staleness": {"sampler_dtype": "float32", "reuse": 1, "lag": 4},
    "all": {"sampler_dtype": "bfloat16", "reuse": 8, "lag": 4},
}
OPSM_DELTA = 0.5  # TRL's documented example value of off_policy_mask_threshold (DeepSeek-V3.2 publishes none)


def arm_loss(method: str, **knobs) -> LossConfig:
    """An arm's loss at the records' aggregation unless it names its own."""
    return LossConfig(method=method, **{"agg": AS_RECORDED_AGG, **knobs})


ARMS = {
    "respo_wtilt": arm_loss("respo_wtilt"),
    "seq_clip": arm_loss("seq_clip"),
    "grpo": arm_loss("grpo"),
    "gspo": arm_loss("gspo"),
    "grpo_trl_seq_mask": arm_loss("grpo", correction="sequence-mask"),  # TRL's default vLLM correction
    "grpo_verl_token_trunc": arm_loss("grpo", correction="token-truncate"),  # verl's rollout_is=token
    "grpo_opsm": arm_loss("grpo", opsm_delta=OPSM_DELTA),  # DeepSeek-V3.2's off-policy sequence mask
    "vespo_token_mean": arm_loss("vespo", agg="token-mean"),  # VESPO's recipe
}
QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)
HIST_EDGES = [round(-1.0 + 0.05 * i, 2) for i in range(41)]  # log w bins; outside [-1, 1] counts in the end bins
LOW_W, HIGH_W = math.log(0.8), math.log(1.2)  # diagnostics.diagnostics' thresholds at diag_eps = 0.2


def cpu_setting() -> str:
    return "scalar" if os.environ.get("ATEN_CPU_CAPABILITY") == "default" else "avx2"


@dataclass
class OffPolicyConfig:
    """The study's grid: model x source x arm x seed, each run a short training loop."""

    models: list[str] = field(default_factory=lambda: ["tiny-qwen3", "tiny-qwen3-moe"])
    """Models (train.py --model)."""
    sources: list[str] = field(default_factory=lambda: list(SOURCES))
    """Sources of off-policy data: mismatch, reuse, staleness, all."""
    arms: list[str] = field(default_factory=lambda: ["respo_wtilt", "grpo_trl_seq_mask"])
    """Arms that train (a method with its correction, from ARMS); the first trains in every source, and its
    steps are read by every arm's coefficient."""
    compare_in: list[str] = field(default_factory=lambda: ["all"])
    """Sources where the arms after the first train too (the reward comparison)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Seeds (sampling, mini-batch order, training problems); arms are compared on the same seeds."""
    iterations: int = 8
    """Rollout batches per run."""
    prompts_per_iteration: int = 16
    """Prompts per rollout batch (x group_size samples)."""
    group_size: int = 8
    """Samples per prompt."""
    lr: float = 3e-4
    """Learning rate of every arm (research/README.md's stress cell: drift within a short run)."""
    sft_steps: int | None = None
    """train.py --sft-steps of the warm start; None = train.py's default (the cached one)."""
    out: str = "research/results/offpolicy"
    """Where the records go (<out>/<setting>/<model>/<source>/<arm>-seed<S>.json)."""
    setting: str | None = None
    """Name of the CPU setting in the records' path; None = scalar under ATEN_CPU_CAPABILITY=default, else avx2."""
    overwrite: bool = False
    """Run again and replace records that exist (default: keep them and skip the run)."""
    summarise: bool = False
    """Only print the tables from the records under --out (every setting found)."""

    def __post_init__(self):
        for name, known, given in (("sources", SOURCES, self.sources), ("arms", ARMS, self.arms),
                                   ("compare_in", SOURCES, self.compare_in)):
            unknown = [g for g in given if g not in known]
            if unknown:
                raise ValueError(f"{name}: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
        if self.iterations < 2:
            raise ValueError(f"iterations: need at least 2, got {self.iterations}")
        self.setting = self.setting or cpu_setting()


def record_path(cfg: OffPolicyConfig, model: str, source: str, arm: str, seed: int) -> Path:
    return ROOT / cfg.out / cfg.setting / model / source / f"{arm}-seed{seed}.json"


def train_config(cfg: OffPolicyConfig, model: str, source: str, arm: str, seed: int):
    from nano_respo.cli import from_flat
    from train import TrainConfig

    knobs = SOURCES[source]
    return from_flat(TrainConfig, dict(model=model, loss=ARMS[arm], seed=seed, iterations=cfg.iterations, lr=cfg.lr,
                                       prompts_per_iteration=cfg.prompts_per_iteration, group_size=cfg.group_size,
                                       reuse=knobs["reuse"], epochs=min(2, knobs["reuse"]), lag=knobs["lag"],
                                       sampler_dtype=knobs["sampler_dtype"], sft_steps=cfg.sft_steps,
                                       eval_problems=16, plots=False, **AS_RECORDED))


# --- reading one optimizer step's mini-batch with every arm --------------------------------

def quantiles(values: torch.Tensor) -> list[float]:
    if not len(values):
        return [float("nan")] * len(QUANTILES)
    return torch.quantile(values.double(), torch.tensor(QUANTILES, dtype=torch.float64)).tolist()


def histogram(values: torch.Tensor) -> list[int]:
    edges = torch.tensor(HIST_EDGES, dtype=torch.float64)
    clamped = values.double().clamp(edges[0] + 1e-9, edges[-1] - 1e-9)
    return torch.histc(clamped, bins=len(edges) - 1, min=edges[0].item(), max=edges[-1].item()).long().tolist()


def applied_coefficients(logp, mu, adv, mask, loss: LossConfig, pi_old) -> torch.Tensor:
    """phi [B, T] as kernel.policy_loss applies it, its branches written out (research/tests/test_offpolicy.py checks
    them against the loss's gradient)."""
    if loss.correction == "none":
        phi, _ = coefficients(logp, mu, adv, mask, loss)  # [B, T]
    else:
        phi, _ = decoupled_coefficients(logp, mu, adv, mask, loss, pi_old)  # [B, T]
    if loss.opsm_delta is not None:
        phi = phi * off_policy_sequence_mask(logp, mu, adv, mask, loss.opsm_delta)[:, None]
    return phi


class StepReader:
    """Pools what the loss saw at each off-policy optimizer step: log w, lengths, every arm's coefficient. Called
    as train.rl_step's watch, it reads every step; `drop` leaves out the steps that were on-policy."""

    def __init__(self, max_new_tokens: int):
        self.max_new_tokens = max_new_tokens
        self.rows = {key: [] for key in ("log_w", "log_rho", "log_trust", "length", "adv")}
        self.phi = {arm: [] for arm in ARMS}  # [responses] mean coefficient per response, scaled to the records' aggregation
        self.outside = {arm: [] for arm in ARMS}  # per step: share the arm's correction truncates or masks
        self.ess = []

    def __call__(self, batch, logp: torch.Tensor, phi: torch.Tensor) -> None:
        self.read(batch, logp)

    def drop(self, steps: set[int]) -> None:
        """Leave out the readings of these steps (0 = the first read)."""
        for pooled in (self.rows, self.phi, self.outside):
            for key, per_step in pooled.items():
                pooled[key] = [v for i, v in enumerate(per_step) if i not in steps]
        self.ess = [v for i, v in enumerate(self.ess) if i not in steps]

    def read(self, micro, logp: torch.Tensor):
        mask, adv, mu = micro.completion_mask, micro.advantages, micro.old_logp
        # Without a separate sampler, mu is the learner at rollout time (pi_old = mu, c = 1).
        pi_old = micro.pi_old_logp if micro.pi_old_logp is not None else mu
        keep = mask.any(-1)  # [B] empty responses carry no weight
        lengths = mask.sum(-1)
        log_w = sequence_log_weight(logp, mu, mask)  # [B]
        self.rows["log_w"].append(log_w[keep])
        self.rows["log_rho"].append(correction_log_ratio(pi_old, mu, mask, "sequence")[keep])
        self.rows["log_trust"].append(sequence_log_weight(logp, pi_old, mask)[keep])
        self.rows["length"].append(lengths[keep].float())
        self.rows["adv"].append(adv[keep].float())
        self.ess.append(effective_sample_share(log_w[keep]).item())
        default_denominator = loss_denominator(mask, AS_RECORDED_AGG, self.max_new_tokens)
        for arm, loss in ARMS.items():
            loss = loss if loss.norm_len else replace(loss, norm_len=self.max_new_tokens)
            phi = applied_coefficients(logp, mu, adv, mask, loss, pi_old)  # [B, T]
            # Per-token weight relative to the records' aggregation: token-mean divides by tokens, not B x T.
            scale = default_denominator / loss_denominator(mask, loss.agg, loss.norm_len).clamp(min=1)
            per_response = (phi * mask).sum(-1) / lengths.clamp(min=1) * scale  # [B]
            self.phi[arm].append(per_response[keep].float())
            if loss.correction != "none":
                level = loss.correction.split("-")[0]
                counted = mask if level == "token" else keep
                out = outside_bounds(correction_log_ratio(pi_old, mu, mask, level), loss) & counted
                self.outside[arm].append(out.sum().item() / max(1, counted.sum().item()))
            elif loss.opsm_delta is not None:
                dropped = (off_policy_sequence_mask(logp, mu, adv, mask, loss.opsm_delta) == 0) & keep
                self.outside[arm].append(dropped.sum().item() / max(1, keep.sum().item()))

    def summary(self) -> dict:
        if not self.rows["log_w"]:
            return {}
        cat = {key: torch.cat(values) for key, values in self.rows.items()}
        log_w, length, adv = cat["log_w"], cat["length"], cat["adv"]
        pos, neg = adv > 0, adv < 0
        low, high, high_neg = pos & (log_w < LOW_W), pos & (log_w > HIGH_W), neg & (log_w > HIGH_W)

        def mean(x):
            return x.mean().item() if len(x) else float("nan")

        out = {"responses": len(log_w), "positives": int(pos.sum()), "negatives": int(neg.sum()),
               "log_w_quantiles": quantiles(log_w), "log_w_quantiles_pos": quantiles(log_w[pos]),
               "log_w_quantiles_neg": quantiles(log_w[neg]), "log_w_hist": histogram(log_w),
               "log_rho_quantiles": quantiles(cat["log_rho"]), "log_trust_quantiles": quantiles(cat["log_trust"]),
               "low_w_pos": int(low.sum()), "low_w_pos_frac": mean(low[pos].float()),
               "high_w_pos_frac": mean(high[pos].float()), "high_w_neg_frac": mean(high_neg[neg].float()),
               "len_low_w_pos": mean(length[low]), "len_high_w_pos": mean(length[high]), "len_pos": mean(length[pos]),
               "ess": sum(self.ess) / len(self.ess), "arms": {}}
        for arm in ARMS:
            phi = torch.cat(self.phi[arm])
            out["arms"][arm] = {
                "phi_low_w_pos": mean(phi[low]),  # what one starved positive gets
                "zero_low_w_pos": mean((phi[low] == 0).float()),  # how many of them get nothing
                "phi_high_w_pos": mean(phi[high]), "phi_high_w_neg": mean(phi[high_neg]),
                "phi_mean_pos": mean(phi[pos]), "phi_mean_neg": mean(phi[neg]),
                "outside_frac": sum(self.outside[arm]) / len(self.outside[arm]) if self.outside[arm] else None}
        return out


# --- one run ---------------------------------------------------------------------------------

def run_one(cfg: OffPolicyConfig, model_name: str, source: str, arm: str, seed: int) -> dict:
    """One short training run: its rewards per batch, its own diagnostics, and the pooled reading of its steps."""
    tcfg = train_config(cfg, model_name, source, arm, seed)
    reader = StepReader(tcfg.max_new_tokens)
    records, watched, _ = watched_run(tcfg, reader)
    # A batch's first step with mu = pi_old = pi (an fp32 sampler at lag 0 then; the lag grows 0, 1, ..., lag as
    # offpolicy.LaggedPolicy's does) has every w = 1 by construction: left out of the reading.
    reader.drop({i for i, r in enumerate(watched) if (r["epoch"], r["minibatch"]) == (0, 0)
                 and tcfg.sampler_dtype == "float32" and min(r["iteration"], tcfg.lag) == 0})
    train = [r for r in records if r["kind"] == "train"]
    first = [r for r in train if (r["epoch"], r["minibatch"]) == (0, 0)]  # one per rollout batch
    rewards = [r["reward"] for r in first]
    router = [r["router_mismatch_frac"] for r in first if r.get("router_mismatch_frac") is not None]
    sampler_kl = [r["sampler_kl"] for r in first if r.get("sampler_kl") is not None]
    tail = rewards[-2:]
    return {"model": model_name, "source": source, "arm": arm, "seed": seed, "setting": cfg.setting,
            **SOURCES[source], "lr": tcfg.lr, "iterations": tcfg.iterations,
            "prompts_per_iteration": tcfg.prompts_per_iteration, "group_size": tcfg.group_size,
            "torch": torch.__version__, "reward_curve": rewards, "mean_reward": sum(rewards) / len(rewards),
            "final_reward": sum(tail) / len(tail),
            "router_mismatch_frac": router, "sampler_kl": sampler_kl,
            "skipped_steps": sum(r["skipped"] or 0 for r in train), "reading": reader.summary()}


def run_grid(cfg: OffPolicyConfig) -> None:
    cells = [(m, s, a, seed) for m in cfg.models for seed in cfg.seeds for s in cfg.sources for a in cfg.arms
             if a == cfg.arms[0] or s in cfg.compare_in]
    todo = [c for c in cells if cfg.overwrite or not record_path(cfg, *c).exists()]
    print(f"{len(cells) - len(todo)} of {len(cells)} records exist (kept); running {len(todo)} "
          f"in setting {cfg.setting}", flush=True)
    for index, cell in enumerate(todo, 1):
        start = time.perf_counter()
        record = run_one(cfg, *cell)
        record["seconds"] = round(time.perf_counter() - start, 1)
        path = record_path(cfg, *cell)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=0))
        print(f"[{index}/{len(todo)}] {cell[0]} {cell[1]} {cell[2]} seed {cell[3]}: reward "
              f"{record['mean_reward']:.3f} mean, {record['final_reward']:.3f} final; "
              f"{record['seconds']:.0f} s -> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)


# --- the tables, from the records ------------------------------------------------------------

def load_records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*/*/*/*.json"))]


def value_range(values, digits: int = 3, percent: bool = False) -> str:
    values = [100 * v if percent else v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return "-"
    lo, hi = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return (lo if lo == hi else f"{lo} to {hi}") + ("%" if percent else "")


def reading_runs(records: list[dict], arm: str = "respo_wtilt") -> list[dict]:
    """The runs whose steps are read by every arm: the first training arm's (respo_wtilt)."""
    return [r for r in records if r["arm"] == arm and r["reading"]]


def cells(records: list[dict]) -> list[tuple[str, str, str]]:
    order = {s: i for i, s in enumerate(SOURCES)}
    return sorted({(r["setting"], r["model"], r["source"]) for r in records},
                  key=lambda c: (c[1], order[c[2]], c[0]))


def pick(records, setting, model, source, arm=None):
    return [r for r in records if (r["setting"], r["model"], r["source"]) == (setting, model, source)
            and (arm is None or r["arm"] == arm)]


def drift_table(records: list[dict]) -> str:
    """Per source: the distribution of log w, the low-w positives and their lengths (ranges over seeds)."""
    runs = reading_runs(records)
    lines = ["| model | source | setting | seeds | log w q1 | q10 | q50 | q90 | q99 | ESS | positives w < 0.8 | "
             "len w < 0.8 | len w > 1.2 | len all positives |", "|---" * 14 + "|"]
    for setting, model, source in cells(runs):
        rs = [r["reading"] for r in pick(runs, setting, model, source)]
        qs = [value_range([x["log_w_quantiles"][i] for x in rs], 2) for i in range(len(QUANTILES))]
        lines.append(f"| {model} | {source} | {setting} | {len(rs)} | " + " | ".join(qs) + " | "
                     f"{value_range([x['ess'] for x in rs], 3)} | {value_range([x['low_w_pos_frac'] for x in rs], 1, True)} | "
                     f"{value_range([x['len_low_w_pos'] for x in rs], 1)} | {value_range([x['len_high_w_pos'] for x in rs], 1)} | "
                     f"{value_range([x['len_pos'] for x in rs], 1)} |")
    return "\n".join(lines)


def factor_table(records: list[dict]) -> str:
    """Which factor of w = (pi / pi_old)(pi_old / mu) carries each source: 10-90% of each log."""
    runs = reading_runs(records)
    lines = ["| model | source | setting | log rho = log pi_old/mu, q10 to q90 | log pi/pi_old, q10 to q90 | "
             "router mismatch share | sampler KL |", "|---" * 7 + "|"]
    for setting, model, source in cells(runs):
        rs = pick(runs, setting, model, source)
        rho = [value_range([r["reading"]["log_rho_quantiles"][i] for r in rs], 3) for i in (1, 3)]
        trust = [value_range([r["reading"]["log_trust_quantiles"][i] for r in rs], 3) for i in (1, 3)]
        router = [sum(r["router_mismatch_frac"]) / len(r["router_mismatch_frac"]) for r in rs if r["router_mismatch_frac"]]
        kl = [sum(r["sampler_kl"]) / len(r["sampler_kl"]) for r in rs if r["sampler_kl"]]
        lines.append(f"| {model} | {source} | {setting} | {rho[0]}; {rho[1]} | {trust[0]}; {trust[1]} | "
                     f"{value_range(router, 2, True)} | {value_range(kl, 5)} |")
    return "\n".join(lines)


def arms_table(records: list[dict], key: str = "phi_low_w_pos") -> str:
    """What each arm's coefficient gives the same drifted responses (the reading runs' steps)."""
    runs = reading_runs(records)
    lines = [f"| model | source | setting | " + " | ".join(ARMS) + " |", "|---" * (3 + len(ARMS)) + "|"]
    for setting, model, source in cells(runs):
        rs = pick(runs, setting, model, source)
        values = [value_range([r["reading"]["arms"][a][key] for r in rs], 2) for a in ARMS]
        lines.append(f"| {model} | {source} | {setting} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def reward_table(records: list[dict]) -> str:
    """Mean and final rollout reward per training arm, ranges over seeds; paired differences to respo_wtilt."""
    lines = ["| model | source | setting | arm | seeds | mean reward | final reward | minus respo_wtilt (mean), per seed |",
             "|---" * 8 + "|"]
    for setting, model, source in cells(records):
        ours = {r["seed"]: r for r in pick(records, setting, model, source, "respo_wtilt")}
        for arm in [a for a in ARMS if pick(records, setting, model, source, a)]:
            rs = pick(records, setting, model, source, arm)
            diffs = [ours[r["seed"]]["mean_reward"] - r["mean_reward"] for r in rs if r["seed"] in ours]
            agree = ("every seed +" if diffs and all(d > 0 for d in diffs) else
                     "every seed -" if diffs and all(d < 0 for d in diffs) else "not resolved")
            paired = "" if arm == "respo_wtilt" else f"{', '.join(f'{d:+.3f}' for d in diffs)} ({agree})"
            lines.append(f"| {model} | {source} | {setting} | {arm} | {len(rs)} | "
                         f"{value_range([r['mean_reward'] for r in rs])} | "
                         f"{value_range([r['final_reward'] for r in rs])} | {paired} |")
    return "\n".join(lines)


def summarise(out: Path) -> str:
    records = load_records(out)
    if not records:
        return f"no records under {out}"
    return "\n\n".join([
        f"{len(records)} records under {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}",
        "## log w per source (the respo_wtilt runs' off-policy steps, pooled over each run; ranges over seeds)",
        drift_table(records),
        "## which factor carries it",
        factor_table(records),
        "## what each arm gives a positive with w < 0.8 (mean coefficient, per-token weight at the records' aggregation)",
        arms_table(records, "phi_low_w_pos"),
        "## share of those positives each arm gives nothing",
        arms_table(records, "zero_low_w_pos"),
        "## what each arm gives a negative with w > 1.2",
        arms_table(records, "phi_high_w_neg"),
        "## reward after the short runs",
        reward_table(records)])


def main(argv=None):
    cfg = parse_config(OffPolicyConfig, argv, prog="python -m research.offpolicy")
    if not cfg.summarise:
        run_grid(cfg)
    print(summarise(ROOT / cfg.out))


if __name__ == "__main__":
    main()
