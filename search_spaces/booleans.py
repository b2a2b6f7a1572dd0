"""No YAML boolean where a number is meant (issue 57): pydantic's lax mode reads `true` as 1
for an int or float field, so `train: {steps: true}` would train one step. Every key of a
space file (and of a candidate file) is walked against the field it fills, before any
validation, and the first boolean in a numeric place is refused in one line."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from shapesweep.common import UserError
from shapesweep.families.base import NUMERIC
from shapesweep.search_spaces.configs import TrainConfig

Found = tuple[str, bool] | None  # (dotted key, the boolean) of the first one in a numeric place


def refuse_booleans(model: type[BaseModel], document: object, file: str, prefix: str = "") -> None:
    """UserError at the first YAML boolean of `document` where `model` takes a number."""
    found = _in_model(model, document, prefix)
    if found is not None:
        key, value = found
        raise UserError(f"expected a number, got {str(value).lower()} (a YAML boolean is not a "
                        "number)", file=file, key=key)


def _join(prefix: str, name: object) -> str:
    return f"{prefix}.{name}" if prefix else str(name)


def _members(annotation: object) -> list[object]:
    """An annotation's alternatives, with Annotated and Optional unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]


def _takes_bool(member: object, value: bool) -> bool:
    if member is bool or member is Any or member is object:
        return True
    return get_origin(member) is Literal and any(arg is value for arg in get_args(member))


def _in_value(annotation: object, value: object, key: str) -> Found:
    members = _members(annotation)
    if isinstance(value, bool):
        numeric = any(m in (int, float) for m in members)
        return (key, value) if numeric and not any(_takes_bool(m, value) for m in members) else None
    for member in members:
        origin, args = get_origin(member), get_args(member)
        if isinstance(value, list) and origin is list and args:
            return _first(_in_value(args[0], item, f"{key}[{i}]") for i, item in enumerate(value))
        if isinstance(value, dict) and origin is dict and len(args) == 2:
            return _first(_in_value(args[1], item, _join(key, name)) for name, item in value.items())
        if isinstance(value, dict) and isinstance(member, type) and issubclass(member, BaseModel):
            return _in_model(member, value, key)
    return None


def _in_model(model: type[BaseModel], document: object, prefix: str) -> Found:
    if not isinstance(document, dict):
        return None
    for name, value in document.items():
        info = model.model_fields.get(str(name))
        if info is None:
            continue  # an unknown key: refused by the model itself
        key = _join(prefix, name)
        special = _SPECIAL.get(str(name))  # a free mapping whose keys name typed fields
        found = special(value, key) if special else None
        if found is None:
            found = _in_value(info.annotation, value, key)
        if found is not None:
            return found
    return None


def _first(results: Iterable[Found]) -> Found:
    return next((found for found in results if found is not None), None)


def _train_keys(value: object, key: str) -> Found:
    """A variant's `train:` (a free mapping the space's recipe merges) read as a recipe."""
    return _in_model(TrainConfig, value, key)


def _tuned(value: object, key: str) -> Found:
    """`tune: {lr: [...]}`: each value read as the train key it tries."""
    if not isinstance(value, dict):
        return None
    for name, values in value.items():
        info = TrainConfig.model_fields.get(str(name))
        if info is not None and isinstance(values, list):
            found = _first(_in_value(info.annotation, item, f"{_join(key, name)}[{i}]")
                           for i, item in enumerate(values))
            if found is not None:
                return found
    return None


def _dimensions(value: object, key: str) -> Found:
    """`fixed:` and `budget.match:`: a numeric dimension's value, and `search:`'s lists of them."""
    if not isinstance(value, dict):
        return None
    for dim, item in value.items():
        if dim not in NUMERIC:
            continue
        items = item if isinstance(item, list) else [item]
        for i, x in enumerate(items):
            if isinstance(x, bool):
                return (f"{_join(key, dim)}[{i}]" if isinstance(item, list) else _join(key, dim), x)
    return None


_SPECIAL: dict[str, Callable[[object, str], Found]] = {
    "train": _train_keys, "tune": _tuned, "fixed": _dimensions, "match": _dimensions,
    "search": _dimensions}

