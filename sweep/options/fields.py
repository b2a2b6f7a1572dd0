"""One declaration per option: a dataclass field carries its flags, help, range and whether
the sweep's options file saves it, and the argparse arguments, their checks and the saved
file are derived from it. A new option is one field: on its group (sweep/options/option_groups.py,
store_args.StoreOptions) when several verbs take it, else on the verb's own arguments
(sweep/cli/verb_table.py, sweep_options.SweepOptions).

Every value is checked here, after argparse and before the verb runs (`checked`): a number
is read from its text (one line naming the flag, never argparse's usage), NaN is never a
number, infinity only where declared, and each against its declared range.

Light on purpose (no Ray, no torch, no numpy): `--help` builds its parsers from here.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack

from shapesweep.common import UserError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Arguments = TypeVar("Arguments")  # a verb's arguments dataclass


@dataclass(frozen=True)
class Flag:
    """How an option is given on the command line, checked, and kept."""

    names: tuple[str, ...]  # messages name the first; a name without a dash is positional
    help: str | None = None
    choices: tuple[Any, ...] | None = None
    at_least: float | None = None  # the smallest value allowed; None: any
    above: float | None = None  # values must be greater than this (0: a positive number)
    at_most: float | None = None  # the largest value allowed; None: any
    infinite: bool = False  # `inf` means something (e.g. never); NaN never does
    metavar: str | None = None
    nargs: str | None = None
    const: Any = None
    read: Callable[[Any], Any] | None = None  # the text given -> the value (may raise UserError)
    cli_default: Callable[[], Any] | None = None  # the command line's own default (the environment's)
    resume: bool = False  # `resume` takes it too, over the saved value
    saved: bool = True  # written to the sweep's options file


class FlagSettings(TypedDict, total=False):
    """`Flag`'s settings but its names: what `option(...)` takes after them."""

    help: str | None
    choices: tuple[Any, ...] | None
    at_least: float | None
    above: float | None
    at_most: float | None
    infinite: bool
    metavar: str | None
    nargs: str | None
    const: object
    read: Callable[[Any], Any] | None
    cli_default: Callable[[], Any] | None
    resume: bool
    saved: bool


def option(default: object, *names: str, **flag: Unpack[FlagSettings]) -> Any:
    """A dataclass field with its flag; `default` is dataclasses.MISSING for a required one."""
    metadata = {"flag": Flag(names, **flag)}
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=lambda: copy.copy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def same_as(model: type, name: str, **changes: object) -> Any:
    """`model`'s field `name` declared again as is, for an option several verbs take (its
    group declares it once). `default=` (and a `help=` that says so) is the one change a
    verb may make, where its own default differs (`demo --max-concurrent 2`)."""
    declared = next(f for f in dataclasses.fields(model) if f.name == name)
    default = changes.pop("default", declared.default)
    metadata: Mapping[str, Any] = declared.metadata
    if changes:
        metadata = {**metadata, "flag": dataclasses.replace(metadata["flag"], **changes)}
    if declared.default_factory is not dataclasses.MISSING and default is dataclasses.MISSING:
        return dataclasses.field(default_factory=declared.default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flagged(model: type, which: Callable[[Flag], bool] | None = None,
            ) -> list[tuple[dataclasses.Field, Flag]]:
    """`model`'s fields that have a flag (and that `which` selects), in field order."""
    return [(f, f.metadata["flag"]) for f in dataclasses.fields(model)
            if "flag" in f.metadata and (which is None or which(f.metadata["flag"]))]


def every(flag: Flag) -> bool:
    return True


def resumed(flag: Flag) -> bool:
    return flag.resume


def add_flags(parser: argparse.ArgumentParser, model: type, which: Callable[[Flag], bool] = every) -> None:
    """An argparse argument for each of `model`'s options `which` selects, in field order."""
    hints = typing.get_type_hints(model)
    for f, flag in flagged(model, which):
        parser.add_argument(*flag.names, **_argparse_settings(f, flag, hints[f.name]))


def default_of(f: dataclasses.Field) -> Any:
    """The command line's default of `f` (MISSING for a required option)."""
    flag = f.metadata["flag"]
    if flag.cli_default:
        return flag.cli_default()
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _argparse_settings(f: dataclasses.Field, flag: Flag, hint: object) -> dict[str, Any]:
    settings: dict[str, Any] = {"help": flag.help}
    for key in ("choices", "metavar", "nargs", "const"):
        if getattr(flag, key) is not None:
            settings[key] = getattr(flag, key)
    default = default_of(f)
    if not flag.names[0].startswith("-"):  # positional: its dest is its name
        if flag.nargs == "?":
            settings["default"] = default
        return settings
    if default is dataclasses.MISSING:
        settings.update(required=True)
        default = None
    settings.update(dest=f.name, default=default)
    kind = value_type(hint)
    if flag.read:  # the text as given, read once parsing is done
        pass
    elif hint is bool:
        settings["action"] = "store_false" if default else "store_true"  # --no-X for a default on
    elif typing.get_origin(kind) is list:
        settings["action"] = "append"
    return settings  # numbers arrive as text, read by `checked` (one line, not argparse's usage)


def value_type(hint: object) -> object:
    """X of `X | None`."""
    if isinstance(hint, types.UnionType):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def number(text: object, kind: type, flag: Flag) -> object:
    """`text` read as an int or a float (a default is already one): NaN is refused, and
    infinity unless the flag gives it a meaning."""
    if not isinstance(text, str):
        return text
    try:
        value = kind(text.strip())
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise UserError(f"expected {what}, got {text!r}", key=flag.names[0]) from None
    if isinstance(value, float) and (math.isnan(value) or (math.isinf(value) and not flag.infinite)):
        raise UserError(f"expected a finite number, got {text!r}", key=flag.names[0])
    return value


def in_range(value: object, flag: Flag) -> None:
    """One line naming the flag when `value` is outside its declared range."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return
    if flag.above is not None and not value > flag.above:
        raise UserError(f"must be more than {flag.above:g}", key=flag.names[0])
    if flag.at_least is not None and not value >= flag.at_least:
        wanted = "0 or more" if flag.at_least == 0 else f"at least {flag.at_least:g}"
        raise UserError(f"must be {wanted}", key=flag.names[0])
    if flag.at_most is not None and not value <= flag.at_most:
        raise UserError(f"must be at most {flag.at_most:g}", key=flag.names[0])


def parsed(model: type, args: argparse.Namespace, which: Callable[[Flag], bool] = every) -> dict[str, Any]:
    """The values of `model`'s options `which` selects from parsed arguments, each read from
    its text and checked against its declared range (one line naming its flag)."""
    hints = typing.get_type_hints(model)
    values = {}
    for f, flag in flagged(model, which):
        value = getattr(args, f.name)
        kind = value_type(hints[f.name])
        if flag.read:
            try:
                value = flag.read(value)
            except ValueError as error:  # a reader's own words, with its flag
                raise UserError(str(error), key=flag.names[0]) from None
        elif kind in (int, float):
            value = number(value, kind, flag)
        in_range(value, flag)
        values[f.name] = value
    return values


def arguments(model: type[Arguments], args: argparse.Namespace) -> Arguments:
    """`model` built from parsed arguments, every option read and checked (one line naming
    its flag): what a verb is given."""
    return model(**parsed(model, args))


def whole_count(value: str | int | None) -> int | None:
    """A positive whole count from its text: `2M`, `50_000`, `1e6` (None: not given)."""
    # Lazy: at check time only; pydantic and numpy would cost `--help` seconds.
    from shapesweep.families.base import parse_count

    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    read = parse_count(str(value))
    if not isinstance(read, int) or read <= 0:
        raise ValueError(f"expected a positive whole number, got {value!r}")
    return read


def saved_values(options: DataclassInstance) -> dict[str, Any]:
    """The options a sweep's options file keeps: every field but those declared unsaved."""
    return {f.name: value for f, value in zip(dataclasses.fields(options),
                                              dataclasses.asdict(options).values(), strict=True)
            if f.metadata.get("flag", Flag(())).saved}
