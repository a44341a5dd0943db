"""The LLM evaluation recorded under several CPU settings, side by side: what every setting carries.

    python -m research.across                 # the committed records -> runs/experiments-across.md
    python -m research.across --records default=research/results/default/records.json \
        mine=runs/experiments/records.json --claims heldout_reward@8:respo_wtilt:above:seq_clip

Runs are chaotic: one rounding difference can flip a seed from learning to stuck, so the
same seeds give different records on different CPU kernels (AVX2 against AVX-512). A
difference is stated only where every setting's paired 95% interval excludes 0 on the same
side; each claim given is checked on every record set, and the command exits with status 1
when one fails on any of them. The committed records' ReSPO is the reconstruction, `respo_wtilt`: the default
reference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


from research.cli import parse_config
from research.lab.report import across_report, claim_result, fmt, parse_claim


@dataclass
class AcrossConfig:
    """Paired differences, stuck counts and claims of one evaluation recorded under several CPU settings."""

    records: list[str] = field(default_factory=lambda: [
        "default=research/results/default/records.json", "avx2=research/results/avx2/records.json"])
    """One label=records.json per setting (research/run.py --records)."""
    claims: list[str] = field(default_factory=list)
    """Claims to check on every setting, e.g. early_auc@8:respo_wtilt:above:seq_clip (exit 1 if one fails anywhere)."""
    reference: str = "respo_wtilt"
    """Method the paired differences subtract the others from."""
    stuck_below: float = 0.1
    """A run is stuck when its final training reward is below this."""
    out: str = "runs/experiments-across.md"
    """Where the markdown goes."""

    def __post_init__(self):
        for entry in self.records:
            label, _, path = entry.partition("=")
            if not label or not Path(path).is_file():
                raise ValueError(f"records: expected label=<an existing records.json>, got {entry!r}")
        for claim in self.claims:
            parse_claim(claim)


def claims_on_every_set(claims, record_sets: dict) -> tuple[str, bool]:
    """One row per claim: its paired difference on each set, and whether it holds on all of them."""
    names = list(record_sets)
    lines = ["| claim | " + " | ".join(names) + " | holds on every setting |", "|---|" + "---|" * (len(names) + 1)]
    everywhere = True
    for claim in claims:
        results = [claim_result(record_sets[name], claim) for name in names]
        holds = all(result[0] for result in results)
        everywhere &= holds
        cells = [f"{fmt(mean, half)} ({pairs} pairs){'' if ok else ', fails'}" for ok, mean, half, pairs in results]
        lines.append(f"| `{claim}` | " + " | ".join(cells) + f" | {'yes' if holds else 'NO'} |")
    return "\n".join(lines), everywhere


def main(argv=None):
    cfg = parse_config(AcrossConfig, argv)
    record_sets = {label: json.loads(Path(path).read_text())
                   for label, _, path in (entry.partition("=") for entry in cfg.records)}
    models = list(dict.fromkeys(r["model"] for records in record_sets.values() for r in records))
    parts, passed = [], True
    for model in models:
        of_model = {label: [r for r in records if r["model"] == model] for label, records in record_sets.items()}
        parts.append(f"# {model}\n\n" + across_report(of_model, cfg.reference, cfg.stuck_below))
        if cfg.claims:
            table, holds = claims_on_every_set(cfg.claims, of_model)
            parts.append(f"## Claims on {model}\n\n{table}")
            passed &= holds
    text = "\n\n".join(parts)
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    Path(cfg.out).write_text(text + "\n")
    print(text + f"\n\nwrote {cfg.out}")
    if not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
