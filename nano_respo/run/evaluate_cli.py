"""eval.py's config and driver: pass@1 / pass@k of any model on a task's held-out split."""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import torch

from ..checkpoint import STATE_FILE, checkpoint_dtype, checkpoint_problem, checkpoints_newest_first, load_trainer_state
from ..config import TrainConfig
from ..evaluation import evaluate
from ..models import apply_prompt_format, is_run_directory, load_model, resolve_device, resolve_model_path
from ..tasks import make_task
from .summary import run_summary


@dataclass
class EvalConfig:
    """Evaluate a trained run (or any model) on a task's held-out split: greedy accuracy, pass@1, pass@k.

    Without --model it evaluates nothing: it lists the runs under runs/ and exits with status 2.
    """

    model: str | None = None
    """Required. A run directory (runs/<name>: its latest checkpoint), a checkpoint directory, a hub id, a local
    model directory, or tiny-qwen3[-moe] (the untrained offline model: a floor to compare with)."""
    task: str | None = None
    """Task name or .jsonl file; None = the checkpoint's training task (else train.py's default)."""
    prompt_format: str | None = None
    """template, no-thinking or plain (train.py's --prompt-format); None = as the checkpoint's tokenizer has it (a run's carries its own)."""
    task_size: int | None = None
    """Task difficulty; None = the checkpoint's when its task is evaluated (else the task's default)."""
    heldout_file: str | None = None
    """JSONL tasks: the held-out file; None = the checkpoint's when its task is evaluated."""
    eval_problems: int | None = None
    """Held-out problems; None = the checkpoint's (else train.py's default)."""
    samples: int | None = None
    """Tempered samples per problem; None = the checkpoint's eval_samples (else train.py's default)."""
    k: int | None = None
    """pass@k's k (<= samples); None = samples."""
    temperature: float | None = None
    """Sampling temperature; None = the checkpoint's (else train.py's default)."""
    max_new_tokens: int | None = None
    """Generation budget; None = the checkpoint's (else train.py's default)."""
    batch_size: int | None = None
    """Sequences per generate call; None = the checkpoint's rollout_batch (256 otherwise)."""
    dtype: str | None = None
    """Model dtype; None = the dtype a run's checkpoint was trained in (float32 otherwise)."""
    device: str = "auto"
    """Device: auto (cuda when available, else cpu), cpu, cuda or cuda:N."""
    threads: int = 1
    """torch CPU threads."""
    json_out: str | None = None
    """Also write the figures to this JSON file."""
    summary: bool = False
    """Print the paper's summaries of the run directory --model from its metrics.jsonl (early, late, the
    positive-branch diagnostic; docs/training.md); nothing is loaded or sampled."""
    newest_readable: bool = False
    """A run directory whose newest checkpoint cannot be read: evaluate its newest readable one instead of
    refusing."""


# EvalConfig field -> the TrainConfig field it falls back to: the run's value, else train.py's default.
FROM_TRAINING = {"task": "task", "task_size": "task_size", "heldout_file": "heldout_file",
                 "eval_problems": "eval_problems", "samples": "eval_samples", "temperature": "temperature",
                 "max_new_tokens": "max_new_tokens"}
TRAIN_DEFAULTS = {f.name: f.default for f in fields(TrainConfig) if f.default is not MISSING}
# Settings that describe the training task: taken from the run only when that task is the one evaluated.
OF_THE_TASK = ("task_size", "heldout_file")


def training_config(model_path: str) -> dict:
    state_file = Path(model_path) / STATE_FILE
    return load_trainer_state(Path(model_path))["config"] if state_file.is_file() else {}


def no_model_message(runs_dir: str = "runs") -> str:
    """What eval.py says without --model: what it evaluates, and the runs there are to choose from."""
    runs = sorted(p.parent.name for p in Path(runs_dir).glob("*/latest"))
    example = f"{runs_dir}/{runs[0]}" if runs else f"{runs_dir}/<name>"
    listed = f"runs under {runs_dir}/: {', '.join(runs)}" if runs else f"no runs under {runs_dir}/ yet: train one with `python train.py`"
    return (f"model: say what to evaluate, e.g. `python eval.py --model {example}` (a run directory, a checkpoint "
            f"directory, a hub id, or tiny-qwen3 for the untrained floor); {listed}")


def refuse_a_damaged_newest_checkpoint(model: str) -> None:
    """One line when `model` is a run directory whose newest checkpoint cannot be read: evaluating an older one
    instead would report figures of weights the run did not end with."""
    run_dir = Path(model).expanduser()
    if not is_run_directory(run_dir):
        return
    newest = checkpoints_newest_first(run_dir)
    problem = checkpoint_problem(newest[0]) if newest else None  # none at all: resolve_model_path says so
    if problem:
        raise ValueError(f"model: the newest checkpoint of {model!r}, {newest[0].name}, cannot be read "
                         f"({problem}); --newest-readable evaluates the newest readable one instead")


def run_eval(cfg: EvalConfig) -> dict:
    if cfg.model is None:
        raise ValueError(no_model_message())
    torch.set_num_threads(cfg.threads)
    if not cfg.newest_readable:
        refuse_a_damaged_newest_checkpoint(cfg.model)
    path = resolve_model_path(cfg.model)
    trained = training_config(path)
    if cfg.task is not None and cfg.task != trained.get("task"):
        trained = {k: v for k, v in trained.items() if k not in OF_THE_TASK}
    settings = {key: getattr(cfg, key) if getattr(cfg, key) is not None
                else trained.get(name, TRAIN_DEFAULTS[name]) for key, name in FROM_TRAINING.items()}
    task = make_task(settings["task"], settings["task_size"], settings["eval_problems"], settings["heldout_file"])
    task.check_budget(settings["max_new_tokens"])
    # A run evaluates in the dtype it trained in: its logged held-out figures were sampled in it.
    dtype = cfg.dtype or (checkpoint_dtype(Path(path)) if trained else None) or "float32"
    model, tokenizer = load_model(path, dtype, resolve_device(cfg.device))
    if cfg.prompt_format is not None:
        apply_prompt_format(tokenizer, cfg.prompt_format)
    figures = evaluate(model, tokenizer, task, settings["max_new_tokens"], settings["temperature"],
                       settings["samples"], cfg.k, batch_size=cfg.batch_size or trained.get("rollout_batch") or 256)
    result = {"model": cfg.model, "checkpoint": path, "task": task.name, "problems": len(task.heldout_problems),
              **{k: settings[k] for k in ("samples", "temperature", "max_new_tokens")}, "dtype": dtype, **figures}
    return result


def print_table(result: dict) -> None:
    rows = [(key, f"{value:.4f}" if isinstance(value, float) else str(value)) for key, value in result.items()]
    width = max(len(key) for key, _ in rows)
    print("\n".join(f"{key:<{width}}  {value}" for key, value in rows))


def main(cfg: EvalConfig) -> dict:
    result = run_summary(cfg.model or "runs/<name>") if cfg.summary else run_eval(cfg)
    print_table(result)
    print(json.dumps(result))
    if cfg.json_out:
        Path(cfg.json_out).write_text(json.dumps(result, indent=1))
    return result
