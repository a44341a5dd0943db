"""Atomic checkpoints: a complete directory appears under its final name, or not at all.

    runs/<name>/checkpoints/iter-000040/   model + tokenizer (save_pretrained), trainer_state.pt
    runs/<name>/checkpoints/iter-000040/dcp/   FSDP runs only: every rank's model and optimizer shards
    runs/<name>/latest                     "checkpoints/iter-000040", replaced with os.replace

Each checkpoint is written into a temporary directory and renamed; `latest` is switched
only after that. A kill at any moment leaves `latest` pointing at a complete checkpoint,
and the directory loads with from_pretrained like any model (eval.py, or --model).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import torch

STATE_FILE = "trainer_state.pt"
SHARDS = "dcp"


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def save_checkpoint(run_dir: Path, model, tokenizer, iteration: int, step: int, config: dict,
                    optimizer_state: dict, model_state: dict | None = None, payload=None, ranks=None,
                    keep: int = 2) -> Path:
    """Write checkpoint `iteration`, point `latest` at it, keep the newest `keep` checkpoints.

    One process: model_state None (the model's own weights), payload None. Under FSDP every
    rank calls it with the gathered full weights as model_state and payload(directory)
    writing this rank's shards (a collective); rank 0 alone writes everything else.
    """
    main = ranks is None or ranks.rank == 0
    barrier = ranks.barrier if ranks is not None else (lambda: None)
    name = f"checkpoints/iter-{iteration:06d}"
    final, tmp = run_dir / name, run_dir / "checkpoints" / f".tmp-iter-{iteration:06d}"
    if not final.exists():  # an existing one is complete (renamed into place) and of the same state
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        barrier()
        try:
            if payload is not None:
                payload(tmp)
            barrier()  # every shard is on disk before rank 0 renames the directory
            if main:
                model.save_pretrained(tmp, state_dict=model_state)
                tokenizer.save_pretrained(tmp)
                torch.save({"iteration": iteration, "step": step, "config": config, "rng": rng_state(),
                            "optimizer": optimizer_state}, tmp / STATE_FILE)
                os.replace(tmp, final)
        finally:
            if main:
                shutil.rmtree(tmp, ignore_errors=True)
    if main:
        write_text_atomic(run_dir / "latest", name)
        older = sorted(p for p in (run_dir / "checkpoints").glob("iter-*") if p != final)
        for stale in older[:max(0, len(older) - (keep - 1))]:
            shutil.rmtree(stale, ignore_errors=True)
    barrier()
    return final


def is_sharded(checkpoint: Path) -> bool:
    """Whether an FSDP run wrote this checkpoint (its optimizer state is in the shards)."""
    return (Path(checkpoint) / SHARDS).is_dir()


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = run_dir / "latest"
    if not pointer.is_file():
        return None
    path = run_dir / pointer.read_text().strip()
    return path if (path / STATE_FILE).is_file() else None


def load_trainer_state(checkpoint: Path) -> dict:
    return torch.load(checkpoint / STATE_FILE, weights_only=False)
