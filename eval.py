"""Held-out pass@1 / pass@k of a checkpoint, run directory, hub id or local model."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers.utils import logging as hf_logging  # noqa: E402

from nano_respo.cli import parse_config  # noqa: E402
from nano_respo.evaluate_cli import EvalConfig, main  # noqa: E402

if __name__ == "__main__":
    hf_logging.disable_progress_bar()
    config = parse_config(EvalConfig)
    try:
        main(config)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
