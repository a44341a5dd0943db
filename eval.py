"""Held-out pass@1 / pass@k of a run, a checkpoint, a hub id or a local model; --summary reads a run's records.

    python eval.py --model runs/<name>              a run's latest checkpoint, on the task it trained on
    python eval.py --model runs/<name> --summary    the paper's early / late scores and diagnostic, nothing sampled
"""


import json
from dataclasses import dataclass
from pathlib import Path

import torch

from nano_respo.checkpoint import (STATE_FILE, checkpoint_dtype, checkpoint_problem,
                                   checkpoints_newest_first, load_trainer_state)
from nano_respo.cli import parse_config
from nano_respo.evaluation import evaluate
from nano_respo.models import (apply_prompt_format, is_run_directory, load_model, resolve_device,
                               resolve_model_path)
from nano_respo.runs import run_command
from nano_respo.summary import run_summary
from nano_respo.tasks import make_task
from train import TrainConfig


@dataclass
class EvalConfig:
    """Evaluate a trained run (or any model) on a task's held-out split: greedy accuracy, pass@1, pass@k."""
    model: str | None = None
    """Required. A run directory (runs/<name>: its latest checkpoint), a checkpoint directory, a hub id, a local model directory, or tiny-qwen3[-moe] (the untrained floor)."""
    task: str | None = None
    """Task name or .jsonl file; None = the checkpoint's training task (else train.py's default)."""
    prompt_format: str | None = None
    """template, no-thinking or plain (train.py's --prompt-format); None = as the checkpoint's tokenizer has it."""
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
    """Sequences per sampler call; None = the checkpoint's rollout_batch (256 otherwise)."""
    dtype: str | None = None
    """Model dtype; None = the dtype a run's checkpoint was trained in (float32 otherwise)."""
    device: str = "auto"
    """auto (cuda when available, else cpu), cpu, cuda or cuda:N."""
    threads: int = 1
    """torch CPU threads."""
    json_out: str | None = None
    """Also write the figures to this JSON file."""
    summary: bool = False
    """Print the paper's summaries of the run directory --model from its metrics.jsonl (early, late, the positive-branch diagnostic); nothing is loaded."""
    newest_readable: bool = False
    """A run directory whose newest checkpoint cannot be read: evaluate its newest readable one instead of refusing."""


# EvalConfig field -> the TrainConfig field it falls back to: the run's value, else train.py's default.
FROM_TRAINING = {"task": "task", "task_size": "task_size", "heldout_file": "heldout_file",
                 "eval_problems": "eval_problems", "samples": "eval_samples", "temperature": "temperature",
                 "max_new_tokens": "max_new_tokens"}
OF_THE_TASK = ("task_size", "heldout_file")  # taken from the run only when its task is the one evaluated


def no_model_message(runs_dir: str = "runs") -> str:
    runs = sorted(p.parent.name for p in Path(runs_dir).glob("*/latest"))
    listed = (f"runs under {runs_dir}/: {', '.join(runs)}" if runs
              else f"no runs under {runs_dir}/ yet: train one with `python train.py`")
    return (f"model: say what to evaluate, e.g. `python eval.py --model {runs_dir}/{runs[0] if runs else '<name>'}` "
            f"(a run directory, a checkpoint directory, a hub id, or tiny-qwen3 for the untrained floor); {listed}")


def refuse_a_damaged_newest_checkpoint(model: str) -> None:
    """Evaluating an older checkpoint instead would report figures of weights the run did not end with."""
    run_dir = Path(model).expanduser()
    newest = checkpoints_newest_first(run_dir) if is_run_directory(run_dir) else []
    problem = checkpoint_problem(newest[0]) if newest else None
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
    trained = load_trainer_state(Path(path))["config"] if (Path(path) / STATE_FILE).is_file() else {}
    if cfg.task is not None and cfg.task != trained.get("task"):
        trained = {k: v for k, v in trained.items() if k not in OF_THE_TASK}
    defaults = TrainConfig()
    settings = {key: getattr(cfg, key) if getattr(cfg, key) is not None else trained.get(name, getattr(defaults, name))
                for key, name in FROM_TRAINING.items()}
    task = make_task(settings["task"], settings["task_size"], settings["eval_problems"], settings["heldout_file"])
    task.check_budget(settings["max_new_tokens"])
    # A run evaluates in the dtype it trained in: its logged held-out figures were sampled in it.
    dtype = cfg.dtype or (checkpoint_dtype(Path(path)) if trained else None) or "float32"
    model, tokenizer = load_model(path, dtype, resolve_device(cfg.device))
    if cfg.prompt_format is not None:
        apply_prompt_format(tokenizer, cfg.prompt_format)
    figures = evaluate(model, tokenizer, task, settings["max_new_tokens"], settings["temperature"],
                       settings["samples"], cfg.k, batch_size=cfg.batch_size or trained.get("rollout_batch") or 256)
    return {"model": cfg.model, "checkpoint": path, "task": task.name, "problems": len(task.heldout_problems),
            **{k: settings[k] for k in ("samples", "temperature", "max_new_tokens")}, "dtype": dtype, **figures}


def main(argv=None) -> dict:
    cfg = parse_config(EvalConfig, argv)
    if cfg.summary:
        result = run_summary(cfg.model or "runs/<name>")
    else:
        from transformers.utils import logging
        logging.disable_progress_bar()
        result = run_eval(cfg)
    width = max(map(len, result))
    print("\n".join(f"{k:<{width}}  {f'{v:.4f}' if isinstance(v, float) else v}" for k, v in result.items()))
    print(json.dumps(result))
    if cfg.json_out:
        Path(cfg.json_out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    run_command(main)
