"""Train a Qwen3 with RLVR and rollout reuse. `python train.py --help` shows the flags a run is set with first,
`--help-all` every flag."""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch starts its thread pool
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    from transformers.utils import logging as hf_logging

    from nano_respo.run.cli import parse_config
    from nano_respo.config import TrainConfig
    from nano_respo.run.loop import train

    hf_logging.disable_progress_bar()
    train(parse_config(TrainConfig))


if __name__ == "__main__":
    try:
        main()  # the imports too: a Ctrl-C while they load stops without a traceback
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    except KeyboardInterrupt as stop:  # session.Stopped names the signal and what --resume continues from
        print(str(stop) or "Ctrl-C: stopped before the run started", file=sys.stderr)
        raise SystemExit(getattr(stop, "exit_code", 130)) from None
