"""The studies' command lines: nano_respo.cli's parser, with what the studies' configs need beyond train.py's.

    cfg = parse_config(ExperimentConfig, argv, prog="python -m research.run")

train.py's TrainConfig (or a subclass) parses exactly as `python train.py` parses it (its --protocol presets, the
rows of kernel.METHOD_TABLE as --method's choices, the study rows registered by importing research/ included).
A study's own config also takes list fields (`--seeds 0 1 2`, `--methods respo grpo`), each value checked against
the same choices (--methods too); the reference's parser has no list fields, since TrainConfig has none.
"""

from __future__ import annotations

import types
import typing

from nano_respo import cli
from nano_respo.kernel import AGG_MODES, METHOD_TABLE, SCALES, WEIGHT_AGAINST
from nano_respo.models import PROMPT_FORMATS, WEIGHT_DTYPES
from nano_respo.protocol import PROTOCOLS
from nano_respo.sft import ANNEALS


def choices() -> dict[str, tuple]:
    """Allowed values by field name, read when a parser is built (a row registered later is a choice too)."""
    return {"method": tuple(METHOD_TABLE), "methods": tuple(METHOD_TABLE), "agg": AGG_MODES, "adv_scale": SCALES,
            "dtype": WEIGHT_DTYPES, "sft_anneal": ANNEALS, "weight_against": WEIGHT_AGAINST,
            "prompt_format": PROMPT_FORMATS}


def list_element(hint):
    """int of `list[int]` and of `list[int] | None`; None for a field that is no list."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_args(hint)[0] if typing.get_origin(hint) in (list, tuple) else None


def parse_config(cls, argv=None, prog: str | None = None, epilog: str | None = None):
    """argv parsed into cls; an unknown flag or a value cls refuses exits with status 2 and one line."""
    import train

    if issubclass(cls, train.TrainConfig):  # as train.py parses it
        return cli.parse_config(cls, argv, first=train.FIRST_FLAGS, presets=PROTOCOLS,
                                choices={"method": tuple(METHOD_TABLE), "agg": AGG_MODES,
                                         "weight_against": WEIGHT_AGAINST}, epilog=epilog or train.EXAMPLES)
    parser = cli.build_parser(cls, choices=choices(), epilog=epilog)
    parser.prog = prog or parser.prog
    lists = {name: list_element(hint) for name, (_, hint, _, _) in cli.flat_fields(cls).items()
             if list_element(hint) is not None}
    for action in parser._actions:  # a list field takes one or more values, each of its element type
        if action.dest in lists:
            action.nargs, action.type = "+", lists[action.dest]
            action.metavar = None if action.choices else lists[action.dest].__name__.upper()
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(cli.unrecognized(cls, unknown))
    try:
        return cli.from_flat(cls, vars(namespace))
    except ValueError as error:
        parser.error(str(error))

