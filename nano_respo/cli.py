"""A command line generated from a flat config dataclass: one flag per field.

The help text of each flag is the one-line docstring written under the field, so the
config class is the single place where a knob is named, typed, defaulted and explained.
A field that is itself a config (TrainConfig.loss: LossConfig) contributes its fields as
flags of their own, so the command line stays flat.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import types
import typing


def field_docs(cls) -> dict[str, str]:
    """The string literal under each field of a dataclass (and of its bases)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs[node.target.id] = after.value.value.strip()
    return docs


def _flag_type(hint):
    """(element type, is_list) of a field's annotation, with Optional[...] unwrapped."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in args if a is not type(None))
        args = typing.get_args(hint)
    if typing.get_origin(hint) in (list, tuple):
        return args[0], True
    return hint, False


def build_parser(cls, description: str | None = None, parser=None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(description=description or (cls.__doc__ or "").strip(),
                                               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            build_parser(hints[f.name], parser=parser)
            continue
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind, is_list = _flag_type(hints[f.name])
        help_text = docs.get(f.name, "").replace("%", "%%")  # argparse formats help with %
        if kind is bool:
            parser.add_argument(flag, dest=f.name, default=default, help=help_text,
                                action=argparse.BooleanOptionalAction)
        else:
            parser.add_argument(flag, dest=f.name, default=default, help=help_text, type=kind,
                                nargs="+" if is_list else None)
    return parser


def parse_config(cls, argv=None, description: str | None = None):
    """Parse argv into cls; a config that rejects a value exits with its one-line message."""
    parser = build_parser(cls, description)
    values = vars(parser.parse_args(argv))
    try:
        return from_flat(cls, values)
    except ValueError as error:
        parser.error(str(error))


def from_flat(cls, values: dict):
    """cls from one flat dict of field values, a composed config built from the names it declares."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: from_flat(hints[f.name], values) if dataclasses.is_dataclass(hints[f.name])
                  else values[f.name] for f in dataclasses.fields(cls) if f.name in values
                  or dataclasses.is_dataclass(hints[f.name])})


def flat(config) -> dict:
    """The inverse of from_flat: one dict of every field, a composed config's fields at the top."""
    values = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        values.update(flat(value) if dataclasses.is_dataclass(value) else {f.name: value})
    return values
