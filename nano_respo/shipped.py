"""Warm starts shipped with the package, as a model hub ships a checkpoint.

The default run's warm start (sft.py) is deterministic training of a tiny model: on one CPU
setting the same inputs give the same weights, a megabyte of them. nano_respo/warm_starts/
holds the ones the default run and the notebooks use, each a `from_pretrained` directory
beside manifest.json: the command that made it, the warm start's cache key (its settings,
data, code version, library versions and CPU setting), how it converged and its held-out
figures. tools/ship_warm_starts.py makes them; tests/run/test_shipped_warm_starts.py
retrains them from their manifests.

A run takes a shipped warm start when its settings and data are the manifest's; the code version, library versions and the CPU
setting are recorded, not matched, so that a fresh clone anywhere starts from the same model.
Other settings train one (and cache it) as before; so does --sft-from-scratch.
"""

from __future__ import annotations

import json
from pathlib import Path

SHIPPED_DIR = Path(__file__).resolve().parent / "warm_starts"
RECORDED_NOT_MATCHED = ("code", "torch", "transformers", "cpu")


def manifests() -> list[tuple[Path, dict]]:
    """(directory, manifest) of every shipped warm start."""
    return [(path.parent, json.loads(path.read_text())) for path in sorted(SHIPPED_DIR.glob("*/manifest.json"))]


def settings(key: dict) -> dict:
    """The part of a warm start's cache key that must match for a shipped one to stand in."""
    return {name: value for name, value in key.items() if name not in RECORDED_NOT_MATCHED}


def shipped_warm_start(key: dict) -> Path | None:
    """The shipped directory whose manifest has `key`'s settings, None when none has them."""
    return next((path for path, manifest in manifests() if settings(manifest["key"]) == settings(key)), None)


def describe(path: Path) -> str:
    """One line: which shipped warm start, where it was made, how it converged."""
    manifest = json.loads((path / "manifest.json").read_text())
    report = manifest["report"]
    return (f"warm start: shipped {path.name} (made on {manifest['key']['cpu']}, converged at step "
            f"{report['converged_at']}, held-out pass@1 {manifest['heldout']['heldout_pass@1']:.3f}); "
            f"--sft-from-scratch trains one here")
