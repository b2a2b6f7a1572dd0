"""The family registry: what a model family is, stated once in its own module.

A family module (e.g. `shapesweep.families.conventional`) defines a pydantic config and
its `SPEC = FamilySpec(...)`; `FAMILY_MODULES` below lists the built-in modules, and the
registry imports them, in that order, the first time anything asks it (torchtitan's model
registry is the model). Everything generic reads the specs instead of naming
families: the solver's field lists and accounting, the result-store columns, the torch
builder and init rules (named as "module:attribute" and imported only when a model is
built, so planning never imports torch), and the dashboards' series names and colours.

Field metadata sits on the config's own fields (torchtitan's `ModelSpec` / `BaseModelArgs`
is the model): whether a field is integer or positive comes from its type and pydantic
constraints; `Stored()` makes it a result column (its arrow type from the annotation) and
`SOLVABLE` lets a space solve for it.
"""

from __future__ import annotations

import importlib
import math
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar, cast, overload

import annotated_types
import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.fields import FieldInfo

from shapesweep.families.task import LANGUAGE, Task

# ---------------------------------------------------------------- shared field types

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
_V = TypeVar("_V")


@overload
def parse_count(value: str) -> int | float: ...
@overload
def parse_count(value: _V) -> _V: ...
def parse_count(value: object) -> object:
    """'113.2M', '1.5B', '2e9', '50_000' and plain numbers -> a number; any other value
    (a pydantic field's raw input) comes back as it is, for the field's own validation."""
    if isinstance(value, bool) or not isinstance(value, str):
        return value
    text = value.strip().replace("_", "").replace(",", "")
    match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)", text)
    if not match:
        raise ValueError(f"cannot read {value!r} as a count (examples: 113.2M, 1.5B, 2e9)")
    number = float(match.group(1)) * _SUFFIX[match.group(2).upper()]
    return int(number) if number.is_integer() else number


MAX_DIM = 2**20  # any one width or count (d_model, d_h, heads, ...): far beyond any real model
# Blocks in sequence (n_layers; an hourglass FFN's k sub-blocks). The deepest transformer
# trained so far has 1,000 layers (DeepNet, Wang et al. 2022), and every layer is Python
# work in the ><former's width solve and in building the torch model, so 2**20 layers only
# ever meant a stalled command (65,537 planned for 22 minutes).
MAX_DEPTH = 1024
MAX_VOCAB = 2**24
MAX_TOKENS = 10**15  # a trial's token budget
MAX_SEED = 2**32  # seeds are 0 <= seed < MAX_SEED (torch and numpy take them)

Count = Annotated[float, BeforeValidator(parse_count)]
IntCount = Annotated[int, BeforeValidator(parse_count)]
PositiveCount = Annotated[int, BeforeValidator(parse_count), Field(gt=0, le=MAX_TOKENS)]
PositiveInt = Annotated[int, Field(gt=0)]
Dim = Annotated[int, Field(gt=0, le=MAX_DIM)]
Depth = Annotated[int, Field(gt=0, le=MAX_DEPTH)]


class Strict(BaseModel):
    """Unknown keys refused; no float may be nan or inf (an infinite lr or a nan beta would
    only fail inside every trial)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# ---------------------------------------------------------------- field markers


@dataclass(frozen=True)
class Stored:
    """Marks a config field as a result-store column; `hover` also shows it in plot hover text."""

    hover: bool = True


@dataclass(frozen=True)
class _Solvable:
    """Marks a config field a space may solve for (`solve:`) to meet its budget."""


SOLVABLE = _Solvable()


def _flatten(annotation: object) -> tuple[Any, list]:
    """(plain type, constraint metadata) through Annotated, Optional and Literal:
    `Annotated[int, Field(gt=0)] | None` -> (int, [Gt(0)]); `Literal['a']` -> (str, [])."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        inner, meta = _flatten(args[0])
        for m in args[1:]:
            meta += m.metadata if isinstance(m, FieldInfo) else [m]
        return inner, meta
    if isinstance(annotation, types.UnionType) or origin is typing.Union:
        kept = [a for a in args if a is not type(None)]
        return _flatten(kept[0]) if len(kept) == 1 else (annotation, [])
    if origin is typing.Literal:
        return type(args[0]), []
    return annotation, []


def field_type(info: FieldInfo) -> Any:
    """The plain type of a field (int, float, bool, str or list[...])."""
    return _flatten(info.annotation)[0]


def _constraints(info: FieldInfo) -> list:
    return [*info.metadata, *_flatten(info.annotation)[1]]


def _is_integer(info: FieldInfo) -> bool:
    return field_type(info) is int


def _is_number(info: FieldInfo) -> bool:
    return field_type(info) in (int, float)


def _is_positive(info: FieldInfo) -> bool:
    return any(isinstance(m, annotated_types.Gt) and m.gt == 0 for m in _constraints(info))


def _marker(info: FieldInfo, kind: type) -> Any:
    return next((m for m in info.metadata if isinstance(m, kind)), None)


# ---------------------------------------------------------------- the spec and registry


def lm_shape_text(row: dict) -> str:
    """An LM's compact shape (legend and table labels)."""
    return f"{value(row, 'd_model')}×{value(row, 'n_layers')}L d_h={value(row, 'd_h')}"


# A decoder-only LM's export formats beside yaml and json (which every family has): the format
# -> its exporter module ("module" path, imported only to export). A family with Llama's exact
# layout adds `hf` and `litgpt` (`LLAMA_EXPORTERS`).
LM_EXPORTERS: Mapping[str, str] = {"torch": "shapesweep.trainers.torch_export"}
LLAMA_EXPORTERS: Mapping[str, str] = {**LM_EXPORTERS, "hf": "shapesweep.trainers.hf_export",
                                      "litgpt": "shapesweep.trainers.litgpt_export"}


@dataclass(frozen=True)
class FamilySpec:
    """What one model family is. Everything but `name`, `config`, `account` and `model` has
    the decoder-only LM's default."""

    name: str
    config: type[BaseModel]  # the pydantic config; its fields carry the markers above
    account: Callable[[Any, int], Any]  # (config, seq_len) -> accounting.Accounting, exact
    model: str  # "module:callable": config -> torch nn.Module (imported only to build)
    # The same closed forms on a namespace of numpy arrays (the vectorised solver); None
    # when the config solves its own shape, so the solver builds configs point by point.
    vector_totals: Callable[[Any, int], dict] | None = None
    init: str = "shapesweep.trainers.mup:lm_rules"  # "module:callable" yielding init rules
    # "module:class" of the block `model` stacks (an LM's: `LayerShape` -> nn.Module, e.g. a
    # parallel attention + MLP block of its own); None: `model` builds its own layers.
    block: str | None = "shapesweep.trainers.lm:Block"
    task: Task = LANGUAGE  # what it learns from: data, evaluation, metrics (families.task)
    # Formats `export --format` writes its folders in, each with its exporter module (yaml and
    # json: every family). A format not here is refused for this family.
    exporters: Mapping[str, str] = field(default_factory=lambda: dict(LM_EXPORTERS))
    figures_name: str = ""  # its name in trainers/gpu-figures.json, where that differs
    width: str = "d_model"  # the width ffn_ratio and width_depth_ratio are relative to
    # The stored fields that set a candidate's shape beside width x depth, in the order a
    # label shows them (`status`'s candidate tables).
    label_fields: tuple[str, ...] = ("d_h", "activation")
    baseline: bool = False  # the LM family the others are drawn against (dashed)
    analysis: bool = False  # trials end with the representation analysis unless train.analysis says
    # Its k and d_h/d_model are designed series (hourglass-ffn: the ratio figure, its Fig. 3, and
    # the U-curve's per-k, per-ratio lines, its Fig. 4).
    ratio_series: bool = False
    colors: dict[str, str] = field(default_factory=dict)  # dashboard series -> colour
    design: Callable[[dict], str] | None = None  # a result row's series; default: the name
    shape_text: Callable[[dict], str] = lm_shape_text
    shows_widths: bool = False  # hover text lists the per-layer widths
    # Stored fields that do not shape this row's model (β and α of a constant-width
    # ><former), so labels leave them out; default: none.
    inert: Callable[[dict], frozenset[str]] | None = None
    # Whether a row has one width in every layer (its family's own constant-width baseline,
    # e.g. a `shape: constant` ><former); default: every row.
    constant: Callable[[dict], bool] | None = None

    def series(self, row: dict) -> str:
        return self.design(row) if self.design else self.name

    def inert_fields(self, row: dict) -> frozenset[str]:
        return self.inert(row) if self.inert else frozenset()

    def constant_width(self, row: dict) -> bool:
        return self.constant(row) if self.constant else True


# The built-in families, registered in this order (their stored fields become result columns
# in this order). A new family is its module plus one line here.
FAMILY_MODULES = (
    "shapesweep.families.conventional",
    "shapesweep.families.hourglass",
    "shapesweep.families.variable_width",
    "shapesweep.families.vision_mlp",
)

_SPECS: dict[str, FamilySpec] = {}
_builtins = [False]  # whether FAMILY_MODULES are registered yet
_columns_fixed: set[str] | None = None  # the stored fields the result schema was built with
_version = [0]  # bumped by register, so derived field sets know when to recompute


def _registry() -> dict[str, FamilySpec]:
    """The registered specs, the built-ins first. They are imported by name on first use (each
    module imports this one, so this one cannot import them at its top), so whichever module
    asks first, the order, and with it the result columns, is FAMILY_MODULES'."""
    if not _builtins[0]:
        _builtins[0] = True
        for module in FAMILY_MODULES:
            _add(importlib.import_module(module).SPEC)
    return _SPECS


def register(spec: FamilySpec) -> FamilySpec:
    """Add a family beside the built-ins (a test's or a notebook's own; a built-in is a line
    in FAMILY_MODULES instead). Re-registering a name replaces it."""
    _registry()
    return _add(spec)


def _add(spec: FamilySpec) -> FamilySpec:
    fields = spec.config.model_fields
    if "family" not in fields or fields["family"].default != spec.name:
        raise ValueError(f"{spec.config.__name__} needs `family: Literal[{spec.name!r}] = {spec.name!r}`")
    new = {name for name, info in fields.items() if _marker(info, Stored)} - set(_columns_fixed or ())
    if _columns_fixed is not None and new:
        raise ValueError(f"{spec.name}: stored fields {sorted(new)} have no result column: register "
                         "the family before shapesweep.results.schema is imported")
    _SPECS[spec.name] = spec
    _version[0] += 1
    return spec


def unregister(name: str) -> None:
    """Take a family back out (a test's or a notebook's own family)."""
    del _registry()[name]
    _version[0] += 1


def get(name: object) -> FamilySpec:
    """The spec of family `name` (a ValueError for any other value: a row's, a document's)."""
    spec = _registry().get(name) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"unknown family {name!r}; expected one of {', '.join(_SPECS)}")
    return spec


def find(name: str) -> FamilySpec | None:
    """The spec of `name`, or None for a family not registered here (e.g. an old result row)."""
    return _registry().get(name)


def of(config: BaseModel) -> FamilySpec:
    """The spec of a config instance (every family's config has its `family` literal)."""
    return get(getattr(config, "family", None))


def names() -> list[str]:
    return list(_registry())


def specs() -> list[FamilySpec]:
    return list(_registry().values())


def baseline() -> str:
    """The LM family the others are compared with (the one spec marked `baseline`)."""
    return next(spec.name for spec in _registry().values() if spec.baseline)


def label_fields() -> tuple[str, ...]:
    """Every family's `label_fields`, merged so each family's own order is kept (a field new
    to the list goes just before the next field of its family already there)."""
    merged: list[str] = []
    for spec in _registry().values():
        for i, name in enumerate(spec.label_fields):
            if name in merged:
                continue
            after = [n for n in spec.label_fields[i + 1:] if n in merged]
            merged.insert(merged.index(after[0]) if after else len(merged), name)
    return tuple(merged)


def load(path: str) -> Any:
    """'package.module:attribute' -> the attribute (how a spec names torch code lazily)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


# ---------------------------------------------------------------- derived field lists


def _walk() -> Iterator[tuple[str, FieldInfo]]:
    """Every field of every family, first appearance first (registration order)."""
    seen: set[str] = set()
    for spec in _registry().values():
        for name, info in spec.config.model_fields.items():
            if name != "family" and name not in seen:
                seen.add(name)
                yield name, info


class FieldNames(Set):
    """A live, ordered set of field names over every registered family, chosen by `test`
    (plus `extra`): a family registered later is included."""

    def __init__(self, test: Callable[[FieldInfo], bool], extra: tuple[str, ...] = ()):
        self._test, self._extra = test, extra
        self._cache: tuple[int, tuple[str, ...]] = (-1, ())

    def _names(self) -> tuple[str, ...]:
        if self._cache[0] != _version[0]:
            found = tuple(name for name, info in _walk() if self._test(info))
            self._cache = (_version[0], found + tuple(n for n in self._extra if n not in found))
        return self._cache[1]

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return f"FieldNames{self._names()}"


INTEGER = FieldNames(_is_integer)
POSITIVE = FieldNames(_is_positive, extra=("ffn_ratio", "width_depth_ratio"))
NUMERIC = FieldNames(_is_number, extra=("ffn_ratio", "width_depth_ratio"))  # counts too ('1.5K')
SOLVABLE_FIELDS = FieldNames(lambda info: _marker(info, _Solvable) is not None)
STORED = FieldNames(lambda info: _marker(info, Stored) is not None)
HOVER = FieldNames(lambda info: getattr(_marker(info, Stored), "hover", False))


def bounds(name: str) -> tuple[float | None, float | None]:
    """(ge, le) of field `name`, the widest over the families that have it (None: unbounded):
    a space's fixed and searched values are held to them before anything is solved."""
    infos = [spec.config.model_fields[name] for spec in _registry().values()
             if name in spec.config.model_fields]
    low = [cast(float, m.ge) for info in infos for m in _constraints(info) if isinstance(m, annotated_types.Ge)]
    high = [cast(float, m.le) for info in infos for m in _constraints(info) if isinstance(m, annotated_types.Le)]
    return (min(low) if low and len(low) == len(infos) else None,
            max(high) if high and len(high) == len(infos) else None)


def stored_fields() -> list[tuple[str, Any]]:
    """(name, plain type) of every stored field, for the result schema. From then on a family
    with a stored field the schema lacks is refused, so no marked field is dropped silently."""
    global _columns_fixed
    fields = [(name, field_type(info)) for name, info in _walk() if name in STORED]
    _columns_fixed = {name for name, _ in fields}
    return fields


# ---------------------------------------------------------------- row helpers


def shape_text(row: dict) -> str:
    """A candidate's shape in one line, as its family's spec writes it (`80×6L d_h=37 k=2`)."""
    family = row.get("family")
    spec = find(family) if isinstance(family, str) else None
    return spec.shape_text(row) if spec else lm_shape_text(row)


def candidate_label(row: dict) -> str:
    """What a person calls a candidate: its variant's name and its shape, then the tuned
    values of a trial row (`hourglass 80×6L d_h=37 k=2 lr=0.003`), wherever a table, log line,
    legend or hover text would otherwise show its key. The key stays in the data."""
    name = row.get("variant")
    name = name if isinstance(name, str) and name else row.get("family") or "?"
    return " ".join(filter(None, [name, shape_text(row), tuned_text(row.get("tuned_json"))]))


def tuned_text(tuned_json: object) -> str:
    """`lr=0.003` for a trial's tuned values ('' when nothing is tuned)."""
    import json

    tuned = json.loads(tuned_json) if isinstance(tuned_json, str) and tuned_json else {}
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in tuned.items())


def value(row: dict, column: str) -> Any:
    """A row's value for labels: None for missing / NaN; whole floats as ints (nullable int
    columns arrive as floats)."""
    v = row.get(column)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, float | np.floating) and float(v).is_integer():
        return int(v)
    return v
