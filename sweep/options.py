"""One declaration per option: a dataclass field carries its flags, help, range and whether
the sweep's options file saves it, and the argparse arguments, their checks and the saved
file are derived from it. A new option is one field (`SweepOptions` in sweep_options.py).

Light on purpose (no Ray, no torch): `--help` builds its parsers from here.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shapesweep.common import UserError


@dataclass(frozen=True)
class Flag:
    """How an option is given on the command line, checked, and kept."""

    names: tuple[str, ...]  # messages name the first; a name without a dash is positional
    help: str | None = None
    choices: tuple[Any, ...] | None = None
    at_least: float | None = None  # the smallest value allowed; None: any
    metavar: str | None = None
    nargs: str | None = None
    const: Any = None
    read: Callable[[Any], Any] | None = None  # the text given -> the value (may raise UserError)
    cli_default: Callable[[], Any] | None = None  # the command line's own default (the environment's)
    resume: bool = False  # `resume` takes it too, over the saved value
    saved: bool = True  # written to the sweep's options file


def option(default: Any, *names: str, **flag: Any) -> Any:
    """A dataclass field with its flag; `default` is dataclasses.MISSING for a required one."""
    metadata = {"flag": Flag(names, **flag)}
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def same_as(model: type, name: str) -> Any:
    """`model`'s field `name` declared again as is, for an option two models share."""
    declared = next(f for f in dataclasses.fields(model) if f.name == name)
    return dataclasses.field(default=declared.default, metadata=declared.metadata)


def _flagged(model: type, which: Callable[[Flag], bool]) -> list[tuple[dataclasses.Field, Flag]]:
    return [(f, f.metadata["flag"]) for f in dataclasses.fields(model)
            if "flag" in f.metadata and which(f.metadata["flag"])]


def every(flag: Flag) -> bool:
    return True


def resumed(flag: Flag) -> bool:
    return flag.resume


def add_flags(parser: argparse.ArgumentParser, model: type, which: Callable[[Flag], bool] = every) -> None:
    """An argparse argument for each of `model`'s options `which` selects, in field order."""
    hints = typing.get_type_hints(model)
    for f, flag in _flagged(model, which):
        parser.add_argument(*flag.names, **_argparse_settings(f, flag, hints[f.name]))


def _argparse_settings(f: dataclasses.Field, flag: Flag, hint: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {"help": flag.help}
    if not flag.names[0].startswith("-"):  # positional: required, its dest is its name
        return settings
    default = flag.cli_default() if flag.cli_default else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)
    settings.update(dest=f.name, default=default)
    kind = _value_type(hint)
    if flag.read:  # the text as given, read once parsing is done
        pass
    elif hint is bool:
        settings["action"] = "store_false" if default else "store_true"  # --no-X for a default on
    elif typing.get_origin(kind) is list:
        settings.update(action="append", type=typing.get_args(kind)[0])
    elif kind is not str:
        settings["type"] = kind
    for key in ("choices", "metavar", "nargs", "const"):
        if getattr(flag, key) is not None:
            settings[key] = getattr(flag, key)
    return settings


def _value_type(hint: Any) -> Any:
    """X of `X | None`."""
    if isinstance(hint, types.UnionType):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def parsed(model: type, args: argparse.Namespace, which: Callable[[Flag], bool] = every) -> dict[str, Any]:
    """The values of `model`'s options `which` selects from parsed arguments, each checked
    against its declared range (one line naming its flag) and read."""
    values = {}
    for f, flag in _flagged(model, which):
        value = getattr(args, f.name)
        if flag.at_least is not None and value is not None and value < flag.at_least:
            wanted = "0 or more" if flag.at_least == 0 else f"at least {flag.at_least:g}"
            raise UserError(f"must be {wanted}", key=flag.names[0])
        values[f.name] = flag.read(value) if flag.read else value
    return values


def saved_values(options: Any) -> dict[str, Any]:
    """The options a sweep's options file keeps: every field but those declared unsaved."""
    return {f.name: value for f, value in zip(dataclasses.fields(options),
                                              dataclasses.asdict(options).values(), strict=True)
            if f.metadata.get("flag", Flag(())).saved}


def add_adjust(parser: argparse.ArgumentParser) -> None:
    """`--adjust`, for the verbs that print verdicts (`status`, `dashboard`). Checked by the
    verb (shapesweep.results.multiplicity.check_method), not by argparse: a bad value is then
    one line. Its names are spelled here so that `--help` imports no statistics."""
    parser.add_argument("--adjust", default=None, metavar="METHOD",
                        help="how a sweep's comparisons with the baseline are adjusted for their "
                        "number: holm (default; family-wise error 5%%, Bonferroni-level "
                        "simultaneous intervals), bh (Benjamini-Hochberg, false discovery rate "
                        "5%%) or none (each at 95%% alone); all pairs of candidates are a "
                        "separate, exploratory family adjusted the same way")
