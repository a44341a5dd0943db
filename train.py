"""Train a Qwen3 with RLVR and rollout reuse. `python train.py --help` shows the flags a run is set with first,
`--help-all` every flag; docs/training.md lists the exit statuses (nano_respo/run/terminal.py)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch starts its thread pool
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    from nano_respo.config import TrainConfig
    from nano_respo.run.cli import parse_config

    cfg = parse_config(TrainConfig)  # before transformers and the trainer load: a mistyped flag answers at once

    from transformers.utils import logging as hf_logging

    from nano_respo.run.loop import train

    hf_logging.disable_progress_bar()
    train(cfg)


if __name__ == "__main__":
    from nano_respo.run.terminal import run_command

    run_command(main, stopped_at_start="Ctrl-C: stopped before the run started")  # a Ctrl-C while imports load
