"""Checks of a training run's arguments that must pass before anything loads.

A bad value found after the warm start costs minutes and surfaces as some library's message
(torch's for a negative weight decay, a tokenizer's for a run directory given as a model).
Each check here fails with one line that names the field (the flag with _ for -), the value
and what is accepted, as the config's own checks do.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from .models import resolve_model_path

DEVICES = "auto, cpu, cuda or cuda:N"


def validate_run_args(cfg) -> None:
    """Refuse a training config whose values cannot give a meaningful run; reads cfg.lr, sft_lr,
    max_grad_norm, weight_decay, group_size, keep_checkpoints, device and model."""
    for field in ("lr", "sft_lr", "max_grad_norm"):
        check_positive(field, getattr(cfg, field))
    if cfg.keep_checkpoints < 1:  # --resume needs one
        raise ValueError(f"keep_checkpoints: must be >= 1, got {cfg.keep_checkpoints}")
    check_non_negative("weight_decay", cfg.weight_decay)
    check_group_size(cfg.group_size)
    check_device(cfg.device)
    check_model(cfg.model)


def check_positive(field: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{field}: must be > 0, got {value}")


def check_non_negative(field: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{field}: must be >= 0, got {value}")


def check_group_size(group_size: int) -> None:
    # Advantages are rewards minus their group's mean: a group of one always has advantage 0.
    if group_size < 2:
        raise ValueError(f"group_size: must be >= 2, got {group_size}; a group of one has advantage 0 "
                         f"(its reward minus its own mean), so nothing would be learned")


def check_device(device: str) -> None:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise ValueError(f"device: unknown device {device!r}; choose {DEVICES}")


def check_model(model: str) -> None:
    """Local directories only: resolving one reads a few small files and loads nothing."""
    if Path(model).exists():
        resolve_model_path(model)
