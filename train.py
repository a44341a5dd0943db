"""Train a Qwen3 with RLVR and rollout reuse. `python train.py --help` lists every flag."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch starts its thread pool
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers.utils import logging as hf_logging  # noqa: E402

from nano_respo.cli import parse_config  # noqa: E402
from nano_respo.trainer import TrainConfig, train  # noqa: E402

if __name__ == "__main__":
    hf_logging.disable_progress_bar()
    config = parse_config(TrainConfig)
    try:
        train(config)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
