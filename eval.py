"""Held-out pass@1 / pass@k of a checkpoint, run directory, hub id or local model."""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    from transformers.utils import logging as hf_logging

    from nano_respo.run.cli import parse_config
    from nano_respo.run.evaluate_cli import EvalConfig, main as evaluate

    hf_logging.disable_progress_bar()
    evaluate(parse_config(EvalConfig))


if __name__ == "__main__":
    try:
        main()
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    except KeyboardInterrupt:  # nothing is written before the figures: stopping loses nothing
        print("stopped: Ctrl-C", file=sys.stderr)
        raise SystemExit(130) from None
