"""Declarative search spaces: YAML (a file or a built-in name) -> a validated `SearchSpace`.

A space says which model family to sweep, the budget every candidate must meet, the
fixed dimensions, the searched ones (lists or ranges) and the free dimension(s) the
solver sets so each point meets the budget. Parsing is strict: any mistake becomes
one `UserError` naming the file, the dotted key and the problem.

Why one module of this length: the space's schema and its one-line errors are one
contract (every check names a key of the same YAML), and splitting it would spread the
key-path bookkeeping (`written_at`) across modules.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from shapesweep.common import UserError, did_you_mean
from shapesweep.families import base
from shapesweep.families.base import INTEGER, MAX_DEPTH, NUMERIC, POSITIVE
from shapesweep.families.base import SOLVABLE_FIELDS as SOLVABLE
from shapesweep.families.lm import has_experts
from shapesweep.search_spaces.accounting import Accounting
from shapesweep.search_spaces.configs import (
    FAMILIES,
    MAX_SEED,
    MOE_FIELDS,
    Count,
    TrainConfig,
    make_config,
    moe_problem,
    parse_count,
)
from shapesweep.search_spaces.expressions import ExpressionError, compile_expression
from shapesweep.search_spaces.limits import (
    MAX_SEEDS,
    MAX_VALUES,
    check_trials,
    check_variants,
    check_work,
)
from shapesweep.search_spaces.safe_yaml import MAX_BYTES, parse_yaml, read_bytes, read_yaml

BUILTIN_DIR = Path(__file__).parent / "builtin"
METRICS = ("non_embedding_params", "total_params", "flops_per_token", "active_params")
DERIVED = ("ffn_ratio", "width_depth_ratio")  # d_h = ffn_ratio*d_model, d_model = ratio*n_layers
# SOLVABLE, NUMERIC, POSITIVE and INTEGER (shapesweep.families.base) are read off every family's fields.
BASELINE_VARIANT = "baseline"  # the variant `status` and the report compare the others with


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Range(_Strict):
    """`{min, max, num|step, log}`: `num` points (evenly or log-spaced) or every `step`
    (a factor when `log`), both ends included."""

    min: FiniteFloat
    max: FiniteFloat
    num: int | None = Field(default=None, gt=0)
    step: FiniteFloat | None = Field(default=None, gt=0)
    log: bool = False

    @model_validator(mode="after")
    def _check(self):
        if self.min > self.max:
            raise ValueError(f"min={self.min} is greater than max={self.max}")
        if (self.num is None) == (self.step is None):
            raise ValueError("give exactly one of num or step")
        if self.log and self.min <= 0:
            raise ValueError("a log range needs min > 0")
        if self.log and self.step is not None and self.step <= 1:
            raise ValueError("a log range's step is a factor and must be > 1")
        if self.count() > MAX_VALUES:
            raise ValueError(f"this range has {self.count():.4g} points; the limit is {MAX_VALUES:,}")
        return self

    def count(self) -> float:
        """How many points `values` builds (before integer rounding merges any), from the
        parameters alone: an absurd range is refused before any array exists."""
        if self.num is not None:
            return self.num
        with np.errstate(all="ignore"):
            span = (np.log(self.max / self.min) / np.log(self.step) if self.log
                    else (self.max - self.min) / self.step)
        return float(np.floor(span + 1e-9)) + 1 if np.isfinite(span) else math.inf

    def values(self, integer: bool = False) -> list:
        if self.num is not None:
            space = np.geomspace if self.log else np.linspace
            points = space(self.min, self.max, self.num)
        elif self.log:
            points = self.min * self.step ** np.arange(int(self.count()))
        else:
            points = self.min + self.step * np.arange(int(self.count()))
        if integer:
            return sorted({int(round(p)) for p in points})
        return [float(p) for p in points]


class Budget(_Strict):
    """Exactly one target metric, or `match` (+ `metric`): the metric of a reference config."""

    non_embedding_params: Count | None = None
    total_params: Count | None = None
    flops_per_token: Count | None = None
    active_params: Count | None = None  # a mixture of experts' per-token parameters
    match: dict[str, Any] | None = None
    metric: Literal["non_embedding_params", "total_params", "flops_per_token",
                    "active_params"] | None = None
    tolerance: float = Field(default=0.01, gt=0)

    @model_validator(mode="after")
    def _one_target(self):
        given = [m for m in METRICS if getattr(self, m) is not None]
        if self.match is None and len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(METRICS)} (or match:), got {given or 'none'}")
        if self.match is not None and given:
            raise ValueError(f"give either match: (with metric:) or {given[0]}, not both")
        if self.metric is not None and self.match is None:
            raise ValueError("metric: only goes with match:")
        for m in given:
            if not 0 < getattr(self, m) < math.inf:
                raise ValueError(f"{m} must be a positive number")
        return self

    @property
    def target_metric(self) -> str:
        if self.match is not None:
            return self.metric or "non_embedding_params"
        return next(m for m in METRICS if getattr(self, m) is not None)


SearchValues = list[Any] | Range


class Variant(_Strict):
    """One family's slice of a space; unset parts inherit from the space."""

    name: str | None = None
    family: str | list[str] | None = None
    budget: Budget | None = None
    fixed: dict[str, Any] | None = None
    search: dict[str, SearchValues] | None = None
    solve: str | list[str] | None = None
    round: dict[str, int] | None = None
    constraints: list[str] | None = None
    train: dict[str, Any] | None = None  # merged key by key over the space's train:


class Resolved(BaseModel):
    """A variant with everything inherited filled in: what the solver works on."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    index: int
    origin: int  # the entry of the space's `variants:` it comes from (0 without variants)
    name: str
    family: str
    budget: Budget
    fixed: dict[str, Any]
    search: dict[str, SearchValues]
    solve: list[str]
    round: dict[str, int]
    constraints: list[str]
    train: TrainConfig  # the space's train: with the variant's own keys over it

    def grid_values(self) -> dict[str, list]:
        """Each searched dimension's values (ranges expanded)."""
        out = {}
        for dim, values in self.search.items():
            out[dim] = values.values(dim in INTEGER) if isinstance(values, Range) else list(values)
        return out

    @property
    def raw_size(self) -> int:
        return math.prod(len(v) for v in self.grid_values().values())

    @property
    def raw_bound(self) -> float:
        """At least `raw_size`, from list lengths and range parameters, building nothing."""
        return math.prod(v.count() if isinstance(v, Range) else len(v) for v in self.search.values())

    @property
    def combo_bound(self) -> float:
        """How many combinations of categorical values the solver loops over (building nothing)."""
        return math.prod(v.count() if isinstance(v, Range) else len(v)
                         for dim, v in self.search.items() if is_categorical(dim, v))

    @property
    def layer_solves(self) -> float:
        """Raw points x depth where the family solves each config's shape itself (its cost),
        else 0; the depth at most MAX_DEPTH (a deeper value is refused on its own)."""
        spec = base.find(self.family)  # an unknown family is refused on its own
        if spec is None or spec.vector_totals is not None:
            return 0
        depths = self._numbers("n_layers")
        if not depths:  # derived: the widest width over the smallest width/depth ratio
            widths, ratios = self._numbers(spec.width), self._numbers("width_depth_ratio")
            depths = [max(widths) / min(ratios)] if widths and ratios else [MAX_DEPTH]
        return self.raw_bound * min(max(depths), MAX_DEPTH)

    def _numbers(self, dim: str) -> list[float]:
        """The positive numbers among `dim`'s fixed value, searched list or range ends."""
        values = self.search.get(dim, self.fixed.get(dim))
        if isinstance(values, Range):
            return [values.min, values.max]
        numbers = []
        for value in values if isinstance(values, list) else [values]:
            try:
                number = parse_count(value)
            except ValueError:
                continue
            if isinstance(number, int | float) and not isinstance(number, bool) and 0 < number < math.inf:
                numbers.append(number)
        return numbers


def is_categorical(dim: str, values: list | Range) -> bool:
    """Whether the solver takes this dimension's values one at a time instead of as a numpy
    column: k (the hourglass's sub-block count, a Python int in its accounting) and text or
    flag dimensions; a numeric one is a column even where it is written as a count ('1.5K')."""
    if isinstance(values, Range):
        return dim == "k"
    return dim == "k" or (dim not in NUMERIC
                          and any(isinstance(x, str | bool) or x is None for x in values))


class SearchSpace(_Strict):
    name: str
    family: str | list[str] | None = None
    description: str = ""
    budget: Budget
    fixed: dict[str, Any] = Field(default_factory=dict)
    search: dict[str, SearchValues] = Field(default_factory=dict)
    solve: str | list[str] = Field(default_factory=list)
    round: dict[str, int] = Field(default_factory=dict)
    constraints: list[str] = Field(default_factory=list)
    variants: list[Variant] | None = None
    train: TrainConfig = Field(default_factory=TrainConfig)
    tune: dict[str, list[Any]] = Field(default_factory=dict)  # train key -> values, each tried
    seeds: list[int] = Field(default_factory=lambda: [0])

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int]) -> list[int]:
        check_seeds(seeds)
        return seeds

    @model_validator(mode="after")
    def _fill_family(self):
        """`family` always says what the space holds, even when only the variants name it."""
        if self.family is None:
            named = [v.family for v in self.variants or [] if v.family is not None]
            if not named or len(named) < len(self.variants or [None]):
                raise ValueError(f"give family ({' | '.join(base.names())}), here or in every variant")
            flat = list(dict.fromkeys(f for x in named for f in (x if isinstance(x, list) else [x])))
            object.__setattr__(self, "family", flat[0] if len(flat) == 1 else flat)
        return self

    _source_text: str = PrivateAttr(default="")
    _source_file: str = PrivateAttr(default="")
    _resolved: tuple | None = PrivateAttr(default=None)  # ids of RESOLVED_FROM + _resolved_once()
    _choice_seeds: list[int] = PrivateAttr(default_factory=list)  # `tune.choice_seeds`

    @property
    def choice_seeds(self) -> list[int]:
        """The seeds that choose each candidate's tuned values (`tune.choice_seeds`), apart
        from the `seeds` that measure them; empty when both are the same seeds."""
        return self._choice_seeds

    @property
    def source_text(self) -> str:
        return self._source_text

    @property
    def source_file(self) -> str:
        return self._source_file

    @property
    def space_hash(self) -> str:
        """A 12-hex hash of the parsed space (YAML formatting and comments do not change it)."""
        dumped = self.model_dump(mode="json")
        if self.choice_seeds:  # kept out of `tune` once parsed (`_check_tune`)
            dumped["tune"] = {**dumped["tune"], CHOICE_SEEDS: self.choice_seeds}
        payload = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @property
    def families(self) -> list[str]:
        return list(dict.fromkeys(v.family for v in self.resolved()))

    @property
    def tuned_count(self) -> int:
        """How many `tune:` combinations there are (1 when nothing is tuned), building none."""
        return math.prod(len(values) for name, values in self.tune.items() if name != CHOICE_SEEDS)

    def trials_per_candidate(self, seeds: list[int] | None = None) -> int:
        """Trials one candidate costs: every tuned combination on each choice seed, then the
        chosen one on each measure seed (`seeds`, default the space's); without choice
        seeds every combination on every seed."""
        measure, tuned = len(seeds or self.seeds), self.tuned_count
        return tuned * len(self.choice_seeds) + measure if self.choice_seeds else tuned * measure

    def tuned_settings(self) -> list[dict[str, Any]]:
        """Every combination of the `tune:` values (one empty one when nothing is tuned)."""
        return [dict(zip(self.tune, combo, strict=True))
                for combo in itertools.product(*self.tune.values())]

    def train_for(self, tuned: dict[str, Any] | None = None, seed: int | None = None,
                  candidate: Any = None) -> TrainConfig:
        """The recipe a trial runs: the candidate's variant's `train:` (else the space's), one
        tuned combination and a seed applied, and tokens_per_param and lr_base_d_model
        resolved for the candidate (`TrainConfig.for_model`; validated)."""
        base = self.train
        if candidate is not None:
            base = self._resolved_once()[1][candidate.variant].train
        fields = overlay(base, tuned) | ({} if seed is None else {"seed": seed})
        train = TrainConfig.model_validate(fields)
        if candidate is None:
            return train
        return train.for_model(candidate.config, candidate.accounting.params_total)

    def resolved(self) -> list[Resolved]:
        """The space as a list of single-family variants (a family list expands to one each),
        made once: every trial's recipe is read from it (`train_for`)."""
        return list(self._resolved_once()[0])

    def _resolved_once(self) -> tuple[list[Resolved], dict[str, Resolved]]:
        """(resolved(), name -> variant), made on first use (and again for a model_copy)."""
        fields = tuple(id(getattr(self, name)) for name in RESOLVED_FROM)
        if self._resolved is None or self._resolved[0] != fields:
            variants = self._resolve()
            self._resolved = (fields, variants, {v.name: v for v in variants})
        return self._resolved[1:]

    def _resolve(self) -> list[Resolved]:
        variants = self.variants or [Variant()]
        out = []
        for origin, variant in enumerate(variants):
            family = variant.family or self.family
            families = family if isinstance(family, list) else [family]
            for fam in families:
                solve = variant.solve if variant.solve is not None else self.solve
                name = variant.name or fam
                if len(families) > 1 and variant.name:
                    name = f"{variant.name}-{fam}"
                own_fixed, own_search = variant.fixed or {}, variant.search or {}
                fixed = {k: x for k, x in self.fixed.items() if k not in own_search} | own_fixed
                search = {k: x for k, x in self.search.items() if k not in own_fixed} | own_search
                out.append(Resolved(
                    index=len(out), origin=origin, name=name, family=fam, budget=variant.budget or self.budget,
                    fixed=fixed, search=search,
                    solve=[solve] if isinstance(solve, str) else list(solve),
                    round={**self.round, **(variant.round or {})},
                    constraints=[*self.constraints, *(variant.constraints or [])],
                    train=merge_train(self.train, variant.train),
                ))
        return out


# The fields `SearchSpace.resolved` reads.
RESOLVED_FROM = ("family", "budget", "fixed", "search", "solve", "round", "constraints",
                 "variants", "train")

# Keys that say one thing several ways: a variant giving one replaces the space's others.
ALTERNATIVES = (("tokens", "tokens_per_param", "steps"), ("warmup_frac", "warmup_tokens"))


def overlay(base: TrainConfig, own: dict[str, Any] | None) -> dict[str, Any]:
    """`base`'s settings with `own`'s keys over them, key by key; a key of `ALTERNATIVES`
    in `own` replaces its alternatives in `base` (warmup_tokens over a warmup_frac)."""
    fields = base.model_dump(exclude_unset=True)
    for group in ALTERNATIVES:
        if set(group) & set(own or {}):
            fields = {k: x for k, x in fields.items() if k not in group}
    return fields | (own or {})


def merge_train(base: TrainConfig, own: dict[str, Any] | None) -> TrainConfig:
    """A variant's `train:` merged over the space's (ValidationError when bad)."""
    return TrainConfig.model_validate(overlay(base, own))


def check_seeds(seeds: list[int]) -> None:
    """1 to MAX_SEEDS seeds, each in [0, 2**32), none twice (each seed is one more trial)."""
    if not seeds:
        raise ValueError("give at least one seed")
    if len(seeds) > MAX_SEEDS:
        raise ValueError(f"more than {MAX_SEEDS} seeds")
    bad = [s for s in seeds if not 0 <= s < MAX_SEED]
    if bad:
        raise ValueError(f"seeds must be whole numbers in [0, 2**{MAX_SEED.bit_length() - 1}), "
                         f"got {bad[0]}")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ValueError(f"seed {twice[0]} is given twice")


def check_sweep_trials(space: SearchSpace, candidates: int | None = None,
                       seeds: list[int] | None = None) -> None:
    """Refuse a sweep of more than MAX_TRIALS trials: its candidates (before solving, one per
    variant) x `tune:` combinations x seeds (`--seeds` when given), counted, not built."""
    n_candidates = len(space.resolved()) if candidates is None else candidates
    if seeds is not None:
        file, key = None, "--seeds"
    else:
        file, key = space.source_file, "tune" if space.tuned_count > 1 else "seeds"
    # choice seeds run every combination, the measure seeds one: counted as if all ran all
    choice = space.choice_seeds or space.tune.get(CHOICE_SEEDS) or []
    check_trials(n_candidates, space.tuned_count,
                 len(space.seeds if seeds is None else seeds) + len(choice),
                 file, key, solved=candidates is not None)


def check_seeds_option(seeds: list[int], key: str = "--seeds") -> list[int]:
    """`check_seeds` for seeds given on the command line (or saved with a sweep): one line."""
    try:
        check_seeds(seeds)
    except ValueError as error:
        raise UserError(str(error), key=key) from None
    return seeds


def constraint_names(family: str) -> frozenset[str]:
    """The columns a constraint may name: the family's fields, the derived ratios and the
    accounting columns (the solver provides each of them)."""
    accounting = {f.name for f in dataclasses.fields(Accounting)} - {"widths"}
    return frozenset(_family_fields(family) - {"widths"} | set(DERIVED) | accounting)


def list_builtin() -> list[tuple[str, str]]:
    """(name, description) of every built-in space, sorted by name."""
    out = []
    for path in sorted(BUILTIN_DIR.glob("*.yaml")):
        doc = read_yaml(path) or {}
        out.append((path.stem, str(doc.get("description", "")).strip()))
    return out


def _locate(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists() or "/" in str(name_or_path):
        if not path.is_file():
            raise UserError("no such file", file=str(path))
        return path
    builtin = BUILTIN_DIR / f"{name_or_path}.yaml"
    if not builtin.is_file():
        names = [n for n, _ in list_builtin()]
        raise UserError(f"not a file and not a built-in space ({did_you_mean(name_or_path, names)}"
                        f"built-ins: {', '.join(names)})", file=str(name_or_path))
    return builtin


def _read_uri(uri: str) -> bytes:
    """A space kept with its sweep under an object-store root (s3://…), via pyarrow."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        with fs.open_input_stream(path) as stream:
            return stream.read(MAX_BYTES + 1)
    except (OSError, pa.ArrowException) as error:
        raise UserError(f"cannot read: {error}", file=uri) from None


def load_space(name_or_path: str | Path) -> SearchSpace:
    """Parse and check a space (a file, a built-in name or a pyarrow URI); every problem is
    a `UserError(problem, file=, key=)`. A space read from a file must say how long a
    trial trains, since `run` and `resume` read spaces only this way."""
    if "://" in str(name_or_path):
        path = str(name_or_path)
        data = _read_uri(path)
    else:
        path = str(_locate(name_or_path))
        data = read_bytes(path)
    doc = parse_yaml(data, path)
    space = parse_space(doc, text=data.decode(), file=path)
    for i, variant in enumerate(space.variants or [Variant()]):
        train = merge_train(space.train, variant.train)
        if train.tokens is None and train.steps is None and train.tokens_per_param is None:
            raise UserError("say how long each trial trains: give train.tokens or train.steps "
                            "(or train.tokens_per_param)", file=path,
                            key=f"variants[{i}].train" if variant.train else "train")
    return space


def parse_space(doc: Any, text: str = "", file: str = "<space>") -> SearchSpace:
    """Validate an already-loaded YAML document (see `load_space`)."""
    if not isinstance(doc, dict):
        raise UserError("a space must be a YAML mapping", file=file)
    try:
        space = SearchSpace.model_validate(doc)
    except ValidationError as error:
        raise _user_error(error, file) from None
    space._source_text = text or yaml.safe_dump(doc, sort_keys=False)
    space._source_file = file
    check_variants(sum(len(f) if isinstance(f := v.family or space.family, list) else 1
                       for v in space.variants or [Variant()]), file)
    _check_variant_trains(space, file)
    check_work(space.resolved(), file, "variants" if space.variants else "search")
    _check_tune(space, file)
    for variant in space.resolved():
        _check_variant(space, variant, file)
    return space


def _check_variant_trains(space: SearchSpace, file: str) -> None:
    """Each variant's `train:` merged over the space's must be a valid recipe."""
    for i, variant in enumerate(space.variants or []):
        try:
            merge_train(space.train, variant.train)
        except ValidationError as error:
            raise _user_error(error, file, f"variants[{i}].train") from None


def _user_error(error: ValidationError, file: str, prefix: str = "") -> UserError:
    errors = error.errors()
    # A union (list | Range) reports one error per branch; the type mismatch of the branch the
    # user did not mean is noise.
    meant = [e for e in errors if e["type"] not in ("list_type", "model_type", "dict_type")]
    first = (meant or errors)[0]
    loc = [str(p) for p in first["loc"]
           if not str(p).startswith(("list[", "function-", "Range", "dict["))]
    key = ".".join([prefix, *loc] if prefix else loc)
    if first["type"] == "extra_forbidden":
        model = TrainConfig if prefix else _model_at(loc[:-1])
        allowed = ", ".join(model.model_fields) if model else "see DESIGN.md"
        hint = did_you_mean(loc[-1], model.model_fields) if model else ""
        return UserError(f"unknown key {loc[-1]!r} ({hint}allowed: {allowed})", file=file, key=key)
    return UserError(first["msg"].removeprefix("Value error, "), file=file, key=key)


def _model_at(loc: list[str]) -> type[BaseModel] | None:
    top = {"budget": Budget, "train": TrainConfig, "variants": Variant}
    if not loc:
        return SearchSpace
    if loc[0] in top:
        return top[loc[0]]
    if loc[0] == "search":
        return Range
    return None


def _family_fields(family: str) -> set[str]:
    return set(FAMILIES[family].model_fields) - {"family"}


def written_at(space: SearchSpace, v: Resolved, section: str, name: str | None = None) -> str:
    """The key where the user wrote `section` (or `section.name`) of resolved variant `v`: in
    its own entry of `variants:` (`variants[1].fixed.d_model`), or at the top of the space,
    where a variant that does not set it inherits it from (`family`, `fixed.d_model`)."""
    path = section if name is None else f"{section}.{name}"
    if not space.variants:
        return path
    own = getattr(space.variants[v.origin], section)
    written = own is not None and (name is None or (isinstance(own, dict) and name in own))
    return f"variants[{v.origin}].{path}" if written else path


def _check_variant(space: SearchSpace, v: Resolved, file: str) -> None:
    if v.family not in FAMILIES:
        raise UserError(f"unknown family {v.family!r} ({did_you_mean(v.family, FAMILIES)}"
                        f"allowed: {', '.join(FAMILIES)})", file=file, key=written_at(space, v, "family"))
    allowed = _family_fields(v.family) | set(DERIVED)
    if v.train.lr_base_d_model is not None and "d_model" not in allowed:
        raise UserError(f"lr_base_d_model scales lr by d_model, which the {v.family} family does "
                        "not have", file=file, key=written_at(space, v, "train", "lr_base_d_model"))
    for section in ("fixed", "search"):
        values = getattr(v, section)
        for dim, value in values.items():
            key = written_at(space, v, section, dim)
            if dim in MOE_FIELDS and v.family not in moe_families():
                raise UserError(f"a mixture of experts is for the {' and '.join(moe_families())} "
                                f"families, not {v.family}", file=file, key=key)
            if dim not in allowed:
                raise UserError(f"unknown dimension {dim!r} for family {v.family} "
                                f"({did_you_mean(dim, allowed)}allowed: {', '.join(sorted(allowed))})",
                                file=file, key=key)
            options = value.values(dim in INTEGER) if isinstance(value, Range) else (
                value if section == "search" else [value])
            if section == "search" and not options:
                raise UserError("empty list of values", file=file, key=key)
            bounds = base.bounds(dim) if dim in NUMERIC else (None, None)  # once per list
            for option in options:
                _check_value(dim, option, file, key, bounds)
    _check_experts(space, v, file)
    both = set(v.fixed) & set(v.search)
    if both and not space.variants:
        dim = sorted(both)[0]
        raise UserError(f"{dim!r} is both fixed and searched", file=file, key=f"search.{dim}")
    solve = written_at(space, v, "solve")
    for dim in v.solve:
        if dim not in SOLVABLE or dim not in allowed:
            ok = [d for d in SOLVABLE if d in allowed]
            raise UserError(f"cannot solve for {dim!r} in family {v.family} ({did_you_mean(dim, ok)}"
                            f"solvable: {', '.join(ok)})", file=file, key=solve)
        if dim in v.fixed or dim in v.search:
            raise UserError(f"{dim!r} is solved, so it cannot also be fixed or searched",
                            file=file, key=solve)
    if base.get(v.family).vector_totals is None and v.solve:
        raise UserError(f"{v.family} solves its own shape; leave solve empty",
                        file=file, key=solve)
    wide = base.get(v.family).width
    pairs = {frozenset({wide, "n_layers"}): "width_depth_ratio", frozenset({wide, "d_h"}): "ffn_ratio"}
    if len(v.solve) == 2 and frozenset(v.solve) not in pairs:
        raise UserError(f"two free dimensions must be [{wide}, n_layers] (with width_depth_ratio) "
                        f"or [{wide}, d_h] (with ffn_ratio)", file=file, key=solve)
    if len(v.solve) == 2 and "d_h" in v.solve and "ffn_ratio" not in {*v.fixed, *v.search}:
        raise UserError(f"solve {v.solve} needs ffn_ratio, fixed or searched", file=file, key=solve)
    if len(v.solve) > 2:
        raise UserError("at most two free dimensions", file=file, key=solve)
    # A missing value belongs to the variant that lacks it, wherever its other values come from.
    _check_complete(v, f"variants[{v.origin}].fixed" if space.variants else "fixed", file)
    for dim, multiple in v.round.items():
        if multiple <= 0:
            raise UserError("a rounding multiple must be positive", file=file,
                            key=written_at(space, v, "round", dim))
    names = constraint_names(v.family)
    for i, expr in enumerate(v.constraints):
        try:
            compile_expression(expr, names)
        except ExpressionError as error:
            raise UserError(str(error), file=file, key=constraint_key(space, v, i)) from None
    if v.budget.match is not None:
        reference_config(space, v, file)


def _check_complete(v: Resolved, key: str, file: str) -> None:
    """Every field the family requires has a value: fixed, searched, solved, or derived from a
    ratio as the solver derives it (an hourglass solving [d_model, n_layers] with no d_h
    and no ffn_ratio would otherwise fail inside the accounting)."""
    given = set(v.fixed) | set(v.search) | set(v.solve)
    wide = base.get(v.family).width
    if "width_depth_ratio" in given and given & {wide, "n_layers"}:
        given |= {wide, "n_layers"}
    if "ffn_ratio" in given and wide in given:
        given.add("d_h")
    required = [name for name, info in FAMILIES[v.family].model_fields.items() if info.is_required()]
    missing = [name for name in required if name not in given]
    if missing:
        dim = missing[0]
        solvable = dim in SOLVABLE and base.get(v.family).vector_totals is not None
        ways = "fix it, search it or solve for it" if solvable else "fix it or search it"
        ratio = {"d_h": f"ffn_ratio (with {wide})", wide: "width_depth_ratio (with n_layers)",
                 "n_layers": f"width_depth_ratio (with {wide})"}.get(dim)
        raise UserError(f"{v.family} needs a value for {dim}: {ways}"
                        + (f", or give {ratio}" if ratio else ""), file=file, key=key)


def moe_families() -> list[str]:
    """The families whose FFN may be a mixture of experts."""
    return [name for name in base.names() if has_experts(base.get(name).config)]


def _check_experts(space: SearchSpace, v: Resolved, file: str) -> None:
    """Fixed MoE settings that no candidate could have are refused here, not dropped one by one."""
    names = ("n_experts", "n_active_experts", "activation")
    if v.family not in moe_families() or any(name in v.search for name in names):
        return
    n_experts, n_active, activation = (v.fixed.get(name, FAMILIES[v.family].model_fields[name].default)
                                       for name in names)
    problem = moe_problem(parse_count(n_experts), parse_count(n_active), activation)
    if problem:
        raise UserError(problem[1], file=file, key=written_at(space, v, "fixed", problem[0]))


def constraint_key(space: SearchSpace, v: Resolved, i: int) -> str:
    """Where constraint i of a resolved variant was written: the space's, then the variant's."""
    if i < len(space.constraints):
        return f"constraints[{i}]"
    return f"variants[{v.origin}].constraints[{i - len(space.constraints)}]"


# train keys no tuned value may change: the seeds list, and the budget ASHA and the
# "completed" status measure trials by (set per space or per variant).
_BUDGET = "a candidate's budget is its space's or variant's train:, the same for every trial"
UNTUNABLE = {"seed": "a space's seeds are its `seeds:`",
             "tokens": _BUDGET, "tokens_per_param": _BUDGET, "steps": _BUDGET}


def tuned_json(tuned: dict[str, Any]) -> str:
    """A trial's tuned values as its row's `tuned_json` ("{}" when nothing is tuned)."""
    return json.dumps(tuned, sort_keys=True)


def tuned_tag(tuned: dict[str, Any]) -> str:
    """6 hex naming a tuned combination in trial ids."""
    return hashlib.sha256(tuned_json(tuned).encode()).hexdigest()[:6]


CHOICE_SEEDS = "choice_seeds"  # the `tune:` key naming the seeds that choose, not train key


def _check_tune(space: SearchSpace, file: str) -> None:
    """Every `tune:` value must be a valid train setting; store them as TrainConfig reads them.
    The trials the combinations make are counted before any is built;
    `tune.choice_seeds` is taken out of the train keys (`SearchSpace.choice_seeds`)."""
    check_sweep_trials(space)
    normal: dict[str, list[Any]] = {}
    choice = space.tune.get(CHOICE_SEEDS)
    for name, values in space.tune.items():
        if name == CHOICE_SEEDS:
            continue
        if name in UNTUNABLE:
            raise UserError(f"{name!r} cannot be tuned ({UNTUNABLE[name]})", file=file,
                            key=f"tune.{name}")
        if name not in TrainConfig.model_fields:
            allowed = [n for n in TrainConfig.model_fields if n not in UNTUNABLE]
            raise UserError(f"unknown train key {name!r} ({did_you_mean(name, allowed)}allowed: "
                            f"{', '.join(allowed)})", file=file, key=f"tune.{name}")
        if not values:
            raise UserError("empty list of values", file=file, key=f"tune.{name}")
        normal[name] = []
        for i, value in enumerate(values):
            try:
                train = space.train_for({name: value}, 0)
            except ValidationError as error:
                problem = error.errors()[0]["msg"].removeprefix("Value error, ")
                raise UserError(problem, file=file, key=f"tune.{name}[{i}]") from None
            value = train.model_dump(mode="json")[name]
            if value in normal[name]:
                raise UserError(f"{value!r} is listed twice", file=file, key=f"tune.{name}[{i}]")
            normal[name].append(value)
    object.__setattr__(space, "tune", normal)
    if choice is not None:
        space._choice_seeds = _check_choice_seeds(space, choice, file)
    for tuned, v in itertools.product(space.tuned_settings(), space.resolved()):
        try:
            TrainConfig.model_validate(overlay(v.train, tuned))
        except ValidationError as error:
            problem = error.errors()[0]["msg"].removeprefix("Value error, ")
            raise UserError(f"{tuned_json(tuned)}: {problem}", file=file, key="tune") from None


def _check_choice_seeds(space: SearchSpace, seeds: list[Any], file: str) -> list[int]:
    """Choice seeds choose among two or more tuned values and are never measure seeds (a
    seed that chose a value would measure it favourably: selection bias)."""
    key = f"tune.{CHOICE_SEEDS}"
    if any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise UserError(f"seeds are whole numbers, got {seeds!r}", file=file, key=key)
    try:
        check_seeds(seeds)
    except ValueError as error:
        raise UserError(str(error), file=file, key=key) from None
    if not space.tune:
        raise UserError("choice seeds choose tuned values, and tune: names none (add a key "
                        "such as lr: [...])", file=file, key=key)
    for name, values in space.tune.items():
        if len(values) < 2:
            raise UserError(f"one value: nothing to choose (a fixed {name} belongs in train:)",
                            file=file, key=f"tune.{name}")
    check_disjoint_seeds(seeds, space.seeds, file=file, key=key)
    return list(seeds)


def check_disjoint_seeds(choice: list[int], measure: list[int], file: str | None = None,
                         key: str = f"tune.{CHOICE_SEEDS}") -> None:
    """The seeds that choose a tuned value never measure it."""
    both = sorted(set(choice) & set(measure))
    if both:
        raise UserError(f"seed {both[0]} would both choose the tuned values and measure them: "
                        "choice seeds and seeds must be disjoint", file=file, key=key)


def _check_value(dim: str, value: Any, file: str, key: str,
                 bounds: tuple[Any, Any] | None = None) -> None:
    """A numeric dimension's value is a number (or a count like '1.5K') in its field's range
    (`bounds`: the field's, where the caller has them already)."""
    if dim not in NUMERIC:
        return  # text and flags: a value no family takes is a dropped (invalid) point
    try:
        number = parse_count(value)
    except ValueError as error:
        raise UserError(str(error), file=file, key=key) from None
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise UserError(f"expected a number, got {value!r}", file=file, key=key)
    if isinstance(number, int) and abs(number) > sys.float_info.max:  # no float holds it
        raise UserError(f"{dim} is too large (a number of {len(str(abs(number)))} digits)",
                        file=file, key=key)
    if not math.isfinite(number):
        raise UserError(f"{dim} must be a finite number, got {value!r}", file=file, key=key)
    if dim in POSITIVE and number <= 0:
        raise UserError(f"{dim} must be positive, got {value!r}", file=file, key=key)
    if dim in INTEGER and not float(number).is_integer():
        raise UserError(f"{dim} must be a whole number, got {value!r}", file=file, key=key)
    low, high = bounds or base.bounds(dim)
    if high is not None and number > high:
        raise UserError(f"{dim} must be at most {high:,}, got {value!r}", file=file, key=key)
    if low is not None and number < low:
        raise UserError(f"{dim} must be at least {low:,}, got {value!r}", file=file, key=key)


def reference_config(space: SearchSpace, v: Resolved, file: str | None = None):
    """The config a `match:` budget refers to: the variant's fixed dims overridden by match."""
    fields = {**v.fixed, "family": v.family, **(v.budget.match or {})}
    family = fields["family"]
    if family not in FAMILIES:
        raise UserError(f"unknown family {family!r}", file=file or space.source_file,
                        key="budget.match.family")
    own = _family_fields(family) | {"family"}
    fields = {k: val for k, val in fields.items() if k in own}
    try:
        return make_config(fields)
    except (ValidationError, ValueError) as error:
        problem = error.errors()[0]["msg"] if isinstance(error, ValidationError) else str(error)
        raise UserError(f"reference config is invalid: {problem}", file=file or space.source_file,
                        key="budget.match") from None

