"""Command lines made from configuration dataclasses, and JSON that other tools can read.

Every CLI of the project (``python -m systems.train``, ``python -m systems.bench.e2e``, ...) is generated
from the fields of its configuration dataclass, so an option, its default, its choices and its help text
are written once, in the dataclass:

    @dataclass
    class Config:
        size: str = option("model preset", default="small", choices=PRESETS)
        steps: int = option("timed steps", default=10)

    parser = argparse.ArgumentParser(formatter_class=HelpFormatter)
    add_arguments(parser, Config)
    cfg = parse(parser, Config, argv)      # a bad value is a usage error (exit 2), not a traceback
    to_argv(cfg)                           # the same configuration as arguments, for a child process

:func:`dump_json` writes strict JSON: NaN and infinities become ``null`` (Python's ``json`` writes bare
``NaN``, which is not JSON and which other readers refuse).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import typing
from pathlib import Path
from typing import Any, Callable, Iterable

_TYPES = {"int": int, "float": float, "str": str}


def option(help: str, *, default: Any = dataclasses.MISSING, choices: Iterable | None = None,
           sweep: bool = False, **kw) -> Any:
    """A dataclass field that is also a command-line option; ``sweep=True`` makes it take several values
    (``nargs="+"``) in CLIs that sweep over it."""
    metadata = {"help": help, "choices": tuple(choices) if choices is not None else None, "sweep": sweep}
    return dataclasses.field(default=default, metadata=metadata, **kw)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and every option's default (switches say what they do instead)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return action.help if action.nargs == 0 else super()._get_help_string(action)


def _base_type(f: dataclasses.Field, owner: type) -> tuple[type, bool]:
    """(element type, optional) of a field annotated ``int``, ``float | None``, ``str``, ``bool``..."""
    hint = typing.get_type_hints(owner)[f.name]
    args = typing.get_args(hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    return base, optional


# argparse reads "-1e-8" as an option name ("--eps: expected one argument"): its test for a negative number knows no
# exponent. None of our options looks like a number, so a value that does is a value, and its range check answers.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$")


def add_arguments(parser: argparse.ArgumentParser, cls: type, *, sweep: bool = False,
                  exclude: Iterable[str] = ()) -> None:
    """One option per field of ``cls`` that has help text; with ``sweep``, fields marked ``sweep`` take a list."""
    parser._negative_number_matcher = _NEGATIVE_NUMBER
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata or f.name in exclude:
            continue
        flag = "--" + f.name.replace("_", "-")
        base, _ = _base_type(f, cls)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if base is bool:
            if default:
                parser.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false",
                                    help=f"do not {f.metadata['help']}")
            else:
                parser.add_argument(flag, dest=f.name, action="store_true", help=f.metadata["help"])
            continue
        many = sweep and f.metadata.get("sweep")
        parser.add_argument(flag, dest=f.name, type=_TYPES.get(getattr(base, "__name__", ""), str),
                            nargs="+" if many else None, default=[default] if many else default,
                            choices=f.metadata.get("choices"), help=f.metadata["help"])


def build(parser: argparse.ArgumentParser, cls: type, args: argparse.Namespace, **fixed: Any):
    """``cls`` from parsed arguments (and ``fixed`` fields, a model say); a value its ``__post_init__``
    refuses becomes a usage error (one line, exit 2), not a traceback."""
    names = {f.name for f in dataclasses.fields(cls)} - set(fixed)
    try:
        return cls(**{k: v for k, v in vars(args).items() if k in names}, **fixed)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))


def parse(parser: argparse.ArgumentParser, cls: type, argv: list[str] | None = None, **fixed: Any):
    """``cls`` from the command line (see :func:`build`)."""
    return build(parser, cls, parser.parse_args(argv), **fixed)


def to_argv(cfg: Any, *, exclude: Iterable[str] = ()) -> list[str]:
    """The command-line arguments that :func:`parse` turns back into ``cfg`` (fields with help text only)."""
    argv = []
    for f in dataclasses.fields(cfg):
        if "help" not in f.metadata or f.name in exclude:
            continue
        value = getattr(cfg, f.name)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if value == default:
            continue
        name = f.name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(f"--{name}" if value else f"--no-{name}")
        elif value is None:
            raise ValueError(f"{f.name}=None cannot be written as an argument (its default is {default!r})")
        else:
            argv += [f"--{name}", str(value)]
    return argv


def read_config_list(path: str | Path, make: Callable[[dict], Any]) -> list[Any]:
    """``make(entry)`` for each entry of a JSON file holding a list of objects (what a ``--config`` option takes). A
    file that cannot be read, is not JSON, is not a list of objects, or holds an entry ``make`` refuses (TypeError,
    ValueError) is one ValueError naming the file and the entry."""
    try:
        entries = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read the configuration file {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"the configuration file {path} is not JSON: {exc}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"the configuration file {path} must hold a list of objects")
    configs = []
    for i, entry in enumerate(entries):
        try:
            configs.append(make(entry))
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"entry {i} of {path}: {exc}") from None
    return configs


def integer(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``minimum`` ("argument --steps: must be >= 1, got 0")."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def positive(text: str) -> float:
    """An argparse ``type``: a finite number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value}")
    return value


def finite(value: Any) -> Any:
    """``value`` with NaN and infinite floats replaced by None, inside lists and dicts too."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dump_json(value: Any, **kw) -> str:
    """Strict JSON (``allow_nan=False``): NaN and infinities written as null."""
    return json.dumps(finite(value), allow_nan=False, **kw)
