"""Study 2 read again: the committed gate 2 cells rerun here from their recorded commands, every response dumped.

    NANO_RESPO_CACHE=<dir> python -m research.reread        # the records of this process's CPU setting
    ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 NANO_RESPO_CACHE=<dir> python -m research.reread
    python -m research.reread --summarise                    # the tables and the scatter, from the dumps

Each record of research/results/gate2-amended/ holds its command (research/gate2.py ...) and its CPU
setting. For each record of this process's setting, the command is parsed again and turned into the train.py
run of each seed exactly as gate 2 launched it (gate2.experiment, common.train_command, with the defaults of the
time it pins: two epochs, --agg seq-mean-token-sum-norm); the run goes through
research/responses.py (train.py's loop, read step by step) up to the gate's last batch, the batches the
gate read, with the gate-1 warm start trained into NANO_RESPO_CACHE by the first run (a few minutes). One
record per gate cell goes to --out: the gate's pooled figures of the rerun beside the committed record's, and
every response of every optimizer step (iteration, step, response, target, length, reward, advantage, log w).
Nothing is trained differently: the dump reads the log-probs the loss is handed.

Float rounding differs between CPUs, so a rerun on another machine is not the committed run: its aggregates are
compared with the record's, and the per-response reading is of the rerun (research/README.md says so).
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from research import gate2
from research.common import ROOT, TRAIN_ENTRY, provenance, train_command
from research.responses import read_run
from nano_respo.models import cache_dir
from research.cli import parse_config
from train import TrainConfig

DIGITS = {"log_w": 5, "advantage": 4, "reward": 1}  # what the dump keeps of each float column


@dataclass
class RereadConfig:
    """Rerun the committed gate 2 cells of this CPU setting, each response of each step dumped; or read the dumps."""

    source: str = "research/results/gate2-amended"
    """The committed gate 2 records whose commands are rerun."""
    out: str = "research/results/gate2-reread"
    """Where one record per gate cell goes (<out>/<the source record's name>)."""
    overwrite: bool = False
    """Rerun a cell whose record exists (default: keep it)."""
    summarise: bool = False
    """Only print the tables and draw the scatter from the records under --out."""
    figure: str = "research/figures/gate2-reread-scatter.png"
    """Where --summarise draws log w against length (positives coloured, the clip band drawn)."""


# gate 2's program as its records name it: the path it had when they were made, and the module it is now.
GATE2_PROGRAMS = ("experiments/gate2.py", "research.gate2")


def gate_config(record: dict) -> gate2.Gate2Config:
    """The Gate2Config the record's command parses to (its environment and program left out)."""
    words = [w for w in shlex.split(record["command"]) if "=" not in w or w.startswith("--")]
    program = next(i for i, w in enumerate(words) if w in GATE2_PROGRAMS)
    return parse_config(gate2.Gate2Config, words[program + 1:])


def seed_runs(record: dict) -> dict[int, TrainConfig]:
    """Each seed's train.py run as gate 2 launched it, cut after the gate's last batch (what the gate read)."""
    cfg = gate_config(record)
    experiment = gate2.experiment(cfg)
    runs = {}
    for seed in cfg.seeds:
        command = train_command(experiment, cfg.model, "seq_clip", cfg.reuse, cfg.lag, seed, resume=False)
        runs[seed] = replace(parse_config(TrainConfig, command[len(TRAIN_ENTRY):]), iterations=cfg.last_batch + 1)
    return runs


def pooled(records_per_seed: dict[int, list[dict]], cfg: gate2.Gate2Config) -> dict:
    """The gate's figures of the rerun, by gate2's own rule: each seed's mean over the gate's steps, then the seeds'."""
    per_seed = {seed: {key: gate2.mean(r.get(key) for r in gate2.gate_steps(records, cfg)) for key in gate2.KEYS}
                for seed, records in records_per_seed.items()}
    return {key: gate2.mean(row[key] for row in per_seed.values()) for key in gate2.KEYS}


def compact(rows: dict[str, list]) -> dict[str, list]:
    return {key: [round(v, DIGITS[key]) for v in values] if key in DIGITS else values for key, values in rows.items()}


def warm_starts() -> list[dict]:
    """The reports of the warm starts in this cache (the gate-1 warm start the reruns start from)."""
    entries = [json.loads(p.read_text()) for p in sorted((cache_dir() / "sft").glob("*/warm_start.json"))]
    return [{"named_as": e["named_as"], "converged_at": e["report"]["converged_at"], "steps": e["report"]["steps"],
             "cpu": e["key"]["cpu"]} for e in entries]


def rerun(record: dict, name: str) -> dict:
    cfg = gate_config(record)
    start = time.perf_counter()
    runs = {seed: read_run(train_cfg) for seed, train_cfg in seed_runs(record).items()}
    return {**provenance("research.reread", empty_cache=False), "source": name,
            "source_command": record["command"], "source_cpu_setting": record["cpu_setting"],
            "gate": asdict(cfg), "warm_starts": warm_starts(),
            "committed_pooled": record["pooled"], "rerun_pooled": pooled({s: r.records for s, r in runs.items()}, cfg),
            "rows": {str(seed): compact(run.rows) for seed, run in runs.items()},
            "seconds": round(time.perf_counter() - start), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}


def run_all(cfg: RereadConfig) -> None:
    setting = provenance("research.reread")["cpu_setting"]
    sources = [p for p in sorted((ROOT / cfg.source).glob("*.json")) if json.loads(p.read_text())["cpu_setting"] == setting]
    print(f"{len(sources)} gate 2 records of the {setting} setting in {cfg.source}", flush=True)
    for index, path in enumerate(sources, 1):
        target = ROOT / cfg.out / path.name
        if target.exists() and not cfg.overwrite:
            print(f"[{index}/{len(sources)}] {path.name}: kept (its record exists)", flush=True)
            continue
        record = rerun(json.loads(path.read_text()), path.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, separators=(",", ":")) + "\n")
        shares = [record[k]["low_w_pos_frac"] for k in ("committed_pooled", "rerun_pooled")]
        same = "every pooled figure equal" if record["committed_pooled"] == record["rerun_pooled"] else "they differ"
        print(f"[{index}/{len(sources)}] {path.name}: low-w share committed {shares[0]:.3f}, rerun {shares[1]:.3f} "
              f"({same}); {record['seconds']} s -> {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}",
              flush=True)


# --- the reading -------------------------------------------------------------------------------

LOW, HIGH = math.log(0.8), math.log(1.2)  # gate 2's band at diag_eps = 0.2
LONG_FROM = 27  # digit_sum's long training targets (PREREGISTRATION.md)


def load(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


def gate_positives(record: dict) -> list[dict]:
    """The positives of the steps the gate read: its batches, each batch's first (on-policy) step left out without a
    lag, as gate2.gate_steps reads them; one dict per positive and step."""
    gate, out = record["gate"], []
    for seed, columns in record["rows"].items():
        first = {}
        for iteration, step in zip(columns["iteration"], columns["step"]):
            first.setdefault(iteration, step)
        for i, (iteration, step) in enumerate(zip(columns["iteration"], columns["step"])):
            if (gate["first_batch"] <= iteration <= gate["last_batch"] and (gate["lag"] or step != first[iteration])
                    and columns["advantage"][i] > 0 and columns["length"][i] > 0):
                out.append({key: values[i] for key, values in columns.items()} | {"seed": int(seed)})
    return out


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def lost_mass(positives: list[dict]) -> dict[str, float]:
    """Per positive, what the sequence clip takes from each tail (each gets 1 on-policy): 1 - w below 0.8, 1 above
    1.2; and on the long targets alone, the shares below 0.8 and above 1.2."""
    long = [p for p in positives if p["target"] >= LONG_FROM]
    return {"low": sum(1 - math.exp(p["log_w"]) for p in positives if p["log_w"] < LOW) / len(positives),
            "high": mean(p["log_w"] > HIGH for p in positives),
            "long_low": mean(p["log_w"] < LOW for p in long), "long_high": mean(p["log_w"] > HIGH for p in long),
            "long": len(long)}


def centred(positives: list[dict], key) -> list[float]:
    """key(p) minus its target's mean: what is left once which target a positive answers is taken out."""
    by_target = defaultdict(list)
    for p in positives:
        by_target[p["target"]].append(key(p))
    means = {t: mean(v) for t, v in by_target.items()}
    return [key(p) - means[p["target"]] for p in positives]


def correlation(x: list[float], y: list[float]) -> float:
    mx, my = mean(x), mean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else float("nan")


def within_target(positives: list[dict]) -> dict[str, float]:
    """Within target: the correlation of length with log w and with the per-token drift log w / |y|, and how many
    tokens longer than their target's mean positive the low-w and the high-w positives are."""
    length = centred(positives, lambda p: p["length"])
    log_w, drift = centred(positives, lambda p: p["log_w"]), centred(positives, lambda p: p["log_w"] / p["length"])
    return {"corr_log_w": correlation(length, log_w), "corr_drift": correlation(length, drift),
            "excess_low": mean(e for e, p in zip(length, positives) if p["log_w"] < LOW),
            "excess_high": mean(e for e, p in zip(length, positives) if p["log_w"] > HIGH)}


def cell_name(record: dict) -> str:
    gate = record["gate"]
    return f"R = {gate['reuse']}" + (f", lag {gate['lag']}" if gate["lag"] else "")


def comparison_table(records: list[dict]) -> str:
    lines = ["| record | rerun on | low-w share: committed / rerun | length low-w / high-w / all, committed | "
             "rerun |", "|---|---|---|---|---|"]
    for r in records:
        c, o = r["committed_pooled"], r["rerun_pooled"]
        lines.append(f"| `{r['source']}` | {r['cpu_setting']} | {c['low_w_pos_frac']:.3f} / {o['low_w_pos_frac']:.3f} | "
                     + " | ".join(" / ".join(f"{x[k]:.1f}" for k in ("len_low_w_pos", "len_high_w_pos", "len_pos"))
                                  for x in (c, o)) + " |")
    return "\n".join(lines)


def tails_table(records: list[dict]) -> str:
    lines = ["| record | cell | positives | lost, w < 0.8 (sum of 1 - w per positive) | lost, w > 1.2 (share) | "
             f"t >= {LONG_FROM}: positives, below 0.8 / above 1.2 | within target: corr(length, log w) | "
             "corr(length, log w / length) | length above target mean, low-w / high-w |", "|---" * 9 + "|"]
    for r in records:
        positives = gate_positives(r)
        lost, within = lost_mass(positives), within_target(positives)
        lines.append(f"| `{r['source']}` | {cell_name(r)} | {len(positives)} | {lost['low']:.3f} | {lost['high']:.3f} | "
                     f"{lost['long']}, {lost['long_low']:.0%} / {lost['long_high']:.0%} | {within['corr_log_w']:+.2f} | "
                     f"{within['corr_drift']:+.2f} | {within['excess_low']:+.1f} / {within['excess_high']:+.1f} |")
    return "\n".join(lines)


def per_target_table(records: list[dict], setting: str) -> str:
    """Pooled over this setting's cells and seeds, per target: the positives, their tails and mean lengths."""
    by_target = defaultdict(list)
    for r in records:
        if r["cpu_setting"] == setting:
            for p in gate_positives(r):
                by_target[p["target"]].append(p)
    lines = [f"| target ({setting}) | positives | w < 0.8 | w > 1.2 | length, low-w | high-w | all |",
             "|---|---|---|---|---|---|---|"]
    for target, ps in sorted(by_target.items()):
        low, high = [p for p in ps if p["log_w"] < LOW], [p for p in ps if p["log_w"] > HIGH]
        lengths = [f"{mean(p['length'] for p in group):.1f}" if group else "-" for group in (low, high, ps)]
        lines.append(f"| {target} | {len(ps)} | {len(low) / len(ps):.0%} | {len(high) / len(ps):.0%} | "
                     + " | ".join(lengths) + " |")
    return "\n".join(lines)


def scatter(records: list[dict], path: Path) -> None:
    """log w against length, one panel per rerun cell: positives coloured by target, negatives grey, the band."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted({r["cpu_setting"] for r in records})
    cells = sorted({cell_name(r) for r in records})
    fig, axes = plt.subplots(len(settings), len(cells), figsize=(4.2 * len(cells), 3.6 * len(settings)),
                             squeeze=False, sharex=True, sharey=True)
    for r in records:
        ax = axes[settings.index(r["cpu_setting"])][cells.index(cell_name(r))]
        positives = gate_positives(r)
        shown = ax.scatter([p["length"] for p in positives], [p["log_w"] for p in positives], s=4, alpha=0.5,
                           c=[p["target"] for p in positives], cmap="viridis", vmin=6, vmax=36)
        ax.axhspan(LOW, HIGH, color="tab:orange", alpha=0.15, lw=0)
        for edge in (LOW, HIGH):
            ax.axhline(edge, color="tab:orange", lw=0.8, ls="--")
        ax.set_title(f"{r['cpu_setting']}, {cell_name(r)} ({len(positives)} positives)", fontsize=9)
        ax.set_ylim(-2.5, 2.5)
    for ax in axes[-1]:
        ax.set_xlabel("response length (tokens)")
    for row in axes:
        row[0].set_ylabel("log w")
    fig.colorbar(shown, ax=axes, label="target t", shrink=0.8)
    fig.suptitle("digit_sum gate 2, rerun here: the positives' log w against length; the band is the sequence "
                 "clip's [0.8, 1.2] (outside it the clip gives w below, 0 above)", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def summarise(out: Path, figure: Path) -> str:
    """The reading of the reruns under `out`, in markdown (what reading.md holds), and the scatter drawn."""
    records = load(out)
    if not records:
        return f"no records under {out}"
    scatter(records, figure)
    parts = ["## The reruns against the committed records (the gate's pooled figures)", comparison_table(records),
             "## Each tail's lost positive mass, the long targets, and length within target", tails_table(records)]
    for setting in sorted({r["cpu_setting"] for r in records}):
        parts += [f"## Per target, {setting} (every cell and seed pooled)", per_target_table(records, setting)]
    return "\n\n".join(parts)


def main(argv=None) -> None:
    cfg = parse_config(RereadConfig, argv, prog="python -m research.reread")
    if cfg.summarise:
        print(summarise(ROOT / cfg.out, ROOT / cfg.figure))
        return
    run_all(cfg)


if __name__ == "__main__":
    main()
