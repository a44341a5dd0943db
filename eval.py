"""Held-out pass@1 / pass@k of a checkpoint, run directory, hub id or local model."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    from nano_respo.run.cli import parse_config
    from nano_respo.run.evaluate_cli import EvalConfig, main as evaluate

    cfg = parse_config(EvalConfig)

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    evaluate(cfg)


if __name__ == "__main__":
    from nano_respo.run.terminal import run_command

    run_command(main, stopped_at_start="stopped: Ctrl-C")  # nothing is written before the figures: nothing is lost
