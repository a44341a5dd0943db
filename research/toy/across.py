"""The same evaluation under several CPU settings, side by side: what every setting carries.

    python -m research.toy.across --records research/toy/results/eval-fresh-default research/toy/results/eval-fresh-avx2 --out research/toy/results/across.md

Runs are chaotic: one rounding difference can flip a seed from learning to stuck, so the
same seeds give different records on different CPU kernels. A claim is stated only where
every setting's paired interval excludes 0 on the same side (research.lab.report.paired_across).
The committed records' ReSPO is the reconstruction, `respo_wtilt`: the default reference.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from research.cli import parse_config
from research.lab.report import across_report, load_records


@dataclass
class AcrossConfig:
    """Paired differences and stuck counts of one evaluation recorded under several settings."""

    records: list[str] = field(default_factory=lambda: ["research/toy/results/eval-fresh-default", "research/toy/results/eval-fresh-avx2"])
    """One entry per setting: a folder (or runs.jsonl), labelled by its name, or label=path+path: later paths replace whole (method, R) cells of earlier ones."""
    reference: str = "respo_wtilt"
    """Method the paired differences subtract the others from."""
    stuck_below: float = 0.1
    """A run is stuck when its final training reward is below this."""
    out: str = "runs/across.md"
    """Where the markdown goes."""


def record_set(entry: str) -> tuple[str, list[dict]]:
    """'label=a+b' -> (label, a's records with every (method, R) cell that b holds taken from b)."""
    label, _, paths = entry.rpartition("=")
    cells = {}
    for path in paths.split("+"):
        replaced = {}
        for r in load_records(path):
            replaced.setdefault((r["method"], r["reuse"]), []).append(r)
        cells.update(replaced)
    return label or os.path.basename(os.path.normpath(paths)).removesuffix(".jsonl"), [r for runs in cells.values() for r in runs]


def main(argv=None):
    cfg = parse_config(AcrossConfig, argv, prog="python -m research.toy.across")
    record_sets = dict(record_set(entry) for entry in cfg.records)
    if len(record_sets) != len(cfg.records):
        raise SystemExit("records: give each setting a label of its own (label=path)")
    text = across_report(record_sets, cfg.reference, cfg.stuck_below)
    os.makedirs(os.path.dirname(cfg.out) or ".", exist_ok=True)
    with open(cfg.out, "w") as f:
        f.write(text + "\n")
    print(text + f"\n\nwrote {cfg.out}")


if __name__ == "__main__":
    main()
