"""A study's `study.yaml`: the question, sweeps, seeds, comparisons and decision rules it
names before it runs, read strictly and checked whole before any work.

A study is pre-registered: what it compares, over which seeds, with which family of
comparisons adjusted together (Holm, whole family, across sweeps) and what result decides
its question are fixed in the file before a trial runs, so the report cannot choose them
after seeing the data. Every problem is one `UserError` naming the file and dotted key:
an unknown key (with a did-you-mean), an unknown space, a bad seed list, a comparison
naming a variant its sweep does not plan, or a rule naming a quantity the report does not
compute (`QUANTITY_PREFIX` + the metric) or a comparison the study does not make.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shapesweep.common import UserError, did_you_mean
from shapesweep.results.sequential import check_range
from shapesweep.search_spaces.candidates import Candidate, short_value
from shapesweep.search_spaces.safe_yaml import read_yaml
from shapesweep.search_spaces.schema import SearchSpace
from shapesweep.search_spaces.seeds import check_disjoint_seeds, check_seeds_option
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import BUILTIN_DIR, list_builtin, load_space

STUDY_FILE = "study.yaml"
STORE_FOLDER = "store"  # studies/NAME/store: the study's --root
REPORT_FILE = "report.md"
QUANTITY_PREFIX = "delta_"  # delta_<metric>: a comparison's paired difference, candidate - baseline
METRICS = ("val_loss", "best_val_loss", "train_loss_tail", "psnr", "ssim")  # what a study compares on
FIELDS = ("mean", "lower", "upper", "p_adjusted")  # what a rule tests of a quantity
RULE = re.compile(r"\s*(\w+)\s*(<=|>=|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
DEFAULT_FAMILY = "main"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SeedRange(_Strict):
    """A sweep's adaptive measure seeds `{min, max}` (seeds 0..max-1 at most, issue 58)."""

    min: int
    max: int


class SweepEntry(_Strict):
    """One sweep of the study: its name in the study's store and its space (a built-in
    space's name, or a YAML file in the study's folder); `seeds`: its own measure seeds,
    an adaptive range (default: the study's)."""

    name: str
    space: str
    seeds: SeedRange | None = None


class Agreement(_Strict):
    """Two sweeps of one space on the same seeds, fixed and adaptive: the report says the
    trials and wall time the adaptive one saved and whether each verdict agrees."""

    fixed: str
    adaptive: str


class Comparison(_Strict):
    """Each variant of `of` against `vs`, paired by seed (`vs_sweep`: a baseline another
    sweep of the study ran; default this sweep's)."""

    sweep: str
    of: str | list[str]
    vs: str = "baseline"
    vs_sweep: str | None = None
    family: str = DEFAULT_FAMILY


class Rule(_Strict):
    """A decision: `rule` (FIELD OP NUMBER, FIELD one of FIELDS) on `quantity` of one of the
    study's comparisons; `holds` / `fails` are the sentences the report states."""

    quantity: str
    of: str
    vs: str = "baseline"
    sweep: str | None = None
    rule: str
    holds: str | None = None
    fails: str | None = None


class Machine(_Strict):
    """The machine the trials must have run on (each given field must match the trial rows'
    column of that name, shapesweep.trainers.machine), so the study compares with earlier data."""

    cpu_model: str | None = None
    torch_version: str | None = None
    device_name: str | None = None


class StudyFile(_Strict):
    question: str
    sweeps: list[SweepEntry] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    metric: str = "val_loss"
    comparisons: list[Comparison] = Field(min_length=1)
    decide: Rule | list[Rule]
    machine: Machine = Machine()
    agreement: Agreement | None = None


# A union (`of: str | list[str]`, `decide: Rule | list[Rule]`) reports one error per branch:
# the type mismatch of the branch not meant is noise, and so is the branch's name in the key.
_OTHER_BRANCH = ("list_type", "model_type", "dict_type")
_BRANCHES = ("str", "Rule")
_MODELS: dict[str, type[BaseModel]] = {"sweeps": SweepEntry, "comparisons": Comparison,
                                       "decide": Rule, "machine": Machine, "agreement": Agreement}


@dataclass(frozen=True)
class Pair:
    """One comparison: `of` (sweep, variant) minus `vs` (sweep, variant), in its family."""

    sweep: str
    of: str
    vs_sweep: str
    vs: str
    family: str

    @property
    def label(self) -> str:
        base = self.vs if self.vs_sweep == self.sweep else f"{self.vs_sweep}/{self.vs}"
        return f"{self.sweep}/{self.of} vs {base}"


@dataclass(frozen=True)
class Decision:
    """A checked `Rule`: the comparison it reads, the field, the operator and the bound."""

    pair: Pair
    quantity: str
    field: str
    op: str
    bound: float
    text: str
    holds: str | None
    fails: str | None


@dataclass(frozen=True)
class Study:
    """A study read and checked: its folder, file text, spaces (by sweep name) and pairs."""

    name: str
    folder: Path
    text: str
    question: str
    sweeps: dict[str, str]  # sweep name -> what `run` is given (a built-in name or a file path)
    spaces: dict[str, SearchSpace]
    seeds: list[int]
    metric: str
    pairs: list[Pair]
    decisions: list[Decision]
    machine: dict[str, str]
    adaptive: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # sweep -> its seeds' (min, max)
    agreement: tuple[str, str] | None = None  # (fixed sweep, adaptive sweep)

    def run_seeds(self, sweep: str) -> str:
        """`run --seeds` of one sweep: its adaptive range, else the study's seeds."""
        if sweep in self.adaptive:
            low, high = self.adaptive[sweep]
            return f"min={low},max={high}"
        return ",".join(map(str, self.seeds))

    @property
    def store(self) -> Path:
        return self.folder / STORE_FOLDER

    @property
    def quantity(self) -> str:
        return QUANTITY_PREFIX + self.metric


def study_names(studies: Path) -> list[str]:
    """The studies under `studies`: each folder that holds a study.yaml."""
    return sorted(p.parent.name for p in studies.glob(f"*/{STUDY_FILE}")) if studies.is_dir() else []


def read_study(studies: Path, name: str) -> Study:
    """`studies/NAME/study.yaml` read and checked (the module docstring says what)."""
    folder = studies / name
    path = folder / STUDY_FILE
    if not NAME.fullmatch(name) or not path.is_file():
        known = study_names(studies)
        raise UserError(f"no study {name!r} ({did_you_mean(name, known)}studies: "
                        f"{', '.join(known) or 'none'})", file=str(studies))
    file = str(path)
    try:
        doc = StudyFile.model_validate(read_yaml(path))
    except ValidationError as error:
        raise _user_error(error, file) from None
    if doc.metric not in METRICS:
        raise UserError(f"{doc.metric!r} is not one of {', '.join(METRICS)}", file=file, key="metric")
    sweeps, spaces = _spaces(doc, folder, file)
    seeds = _seeds(doc, spaces, file)
    pairs = _pairs(doc, spaces, file)
    rules = doc.decide if isinstance(doc.decide, list) else [doc.decide]
    decisions = [_decision(rule, i, pairs, QUANTITY_PREFIX + doc.metric, file, len(rules) > 1)
                 for i, rule in enumerate(rules)]
    machine = {k: v for k, v in doc.machine.model_dump().items() if v is not None}
    adaptive = _adaptive(doc, seeds, file)
    agreement = _agreement(doc, adaptive, file)
    return Study(name, folder, path.read_text(encoding="utf-8"), doc.question, sweeps, spaces,
                 seeds, doc.metric, pairs, decisions, machine, adaptive, agreement)


def _adaptive(doc: StudyFile, seeds: list[int], file: str) -> dict[str, tuple[int, int]]:
    """Each sweep's adaptive range, checked: 2 <= min <= max, its seeds 0..max-1 the study's."""
    out = {}
    for i, entry in enumerate(doc.sweeps):
        if entry.seeds is None:
            continue
        key = f"sweeps.{i}.seeds"
        low, high = check_range(entry.seeds.min, entry.seeds.max, key, file)
        outside = [s for s in range(high) if s not in seeds]
        if outside:
            raise UserError(f"seed {outside[0]} of the range is not one of the study's seeds "
                            f"({', '.join(map(str, seeds))}): the sweeps must run on the same seeds",
                            file=file, key=key)
        out[entry.name] = (low, high)
    return out


def _agreement(doc: StudyFile, adaptive: dict[str, tuple[int, int]], file: str) -> tuple[str, str] | None:
    """The fixed and the adaptive sweep the report compares, checked."""
    if doc.agreement is None:
        return None
    names = [entry.name for entry in doc.sweeps]
    fixed, flexible = doc.agreement.fixed, doc.agreement.adaptive
    for sweep, side in ((fixed, "fixed"), (flexible, "adaptive")):
        if sweep not in names:
            raise UserError(f"no sweep {sweep!r} in the study ({did_you_mean(sweep, names)}sweeps: "
                            f"{', '.join(names)})", file=file, key=f"agreement.{side}")
    if fixed in adaptive or flexible not in adaptive:
        raise UserError("the fixed sweep needs the study's seeds and the adaptive one a range "
                        "(sweeps.N.seeds: {min, max})", file=file, key="agreement")
    if doc.sweeps[names.index(fixed)].space != doc.sweeps[names.index(flexible)].space:
        raise UserError("the two sweeps must run one space", file=file, key="agreement")
    return fixed, flexible


def _user_error(error: ValidationError, file: str) -> UserError:
    """The first problem, an unknown key first (with the nearest allowed key)."""
    errors = error.errors()
    meant = [e for e in errors if e["type"] not in _OTHER_BRANCH] or errors
    unknown = [e for e in meant if e["type"] == "extra_forbidden"]
    first = (unknown or meant)[0]
    loc = [str(p) for p in first["loc"] if str(p) not in _BRANCHES and not str(p).startswith("list[")]
    key = ".".join(loc)
    if first["type"] == "extra_forbidden":
        names = [p for p in loc[:-1] if not p.isdigit() and p in _MODELS]
        model = _MODELS[names[0]] if names else StudyFile
        fields = list(model.model_fields)
        return UserError(f"unknown key {loc[-1]!r} ({did_you_mean(loc[-1], fields)}allowed: "
                         f"{', '.join(fields)})", file=file, key=key)
    return UserError(first["msg"].removeprefix("Value error, "), file=file, key=key)


def _spaces(doc: StudyFile, folder: Path, file: str) -> tuple[dict[str, str], dict[str, SearchSpace]]:
    """Each sweep's space, loaded (a problem inside a space file names that file)."""
    sweeps: dict[str, str] = {}
    spaces: dict[str, SearchSpace] = {}
    for i, entry in enumerate(doc.sweeps):
        key = f"sweeps.{i}"
        if not NAME.fullmatch(entry.name) or entry.name in sweeps:
            why = "given twice" if entry.name in sweeps else "not a sweep name (letters, digits, . _ -)"
            raise UserError(f"{entry.name!r}: {why}", file=file, key=f"{key}.name")
        sweeps[entry.name] = _space_source(entry.space, folder, file, f"{key}.space")
        spaces[entry.name] = load_space(sweeps[entry.name])
    return sweeps, spaces


def _space_source(space: str, folder: Path, file: str, key: str) -> str:
    """A built-in space's name, or the path of a space file in the study's folder."""
    if space.endswith((".yaml", ".yml")) or "/" in space:
        path = (folder / space).resolve()
        if not path.is_relative_to(folder.resolve()) or not path.is_file():
            raise UserError(f"{space!r}: no such space file in the study's folder", file=file, key=key)
        return str(folder / space)
    if not (BUILTIN_DIR / f"{space}.yaml").is_file():
        names = [n for n, _ in list_builtin()]
        raise UserError(f"{space!r} is not a built-in space ({did_you_mean(space, names)}or a "
                        "file of the study's folder: NAME.yaml)", file=file, key=key)
    return space


def _seeds(doc: StudyFile, spaces: dict[str, SearchSpace], file: str) -> list[int]:
    try:
        seeds = check_seeds_option(list(doc.seeds), key="seeds")
    except UserError as error:
        raise UserError(error.problem, file=file, key="seeds") from None
    for space in spaces.values():
        check_disjoint_seeds(list(space.choice_seeds), seeds, file, "seeds")
    return seeds


def candidate_labels(space: SearchSpace) -> dict[str, str]:
    """Each planned candidate's name in a study, by key: its variant's name where the variant
    has one candidate, else that name and the config fields that tell the variant's candidates
    apart (the fewest, in the config's order, that make each unique), e.g. `bottleneck
    resize=carry` or `baseline d_model=64`."""
    groups: dict[str, list[Candidate]] = {}
    for candidate in plan(space).candidates:
        groups.setdefault(candidate.variant, []).append(candidate)
    labels: dict[str, str] = {}
    for variant, group in groups.items():
        dumps = [c.config.model_dump(mode="json") for c in group]
        differing = [k for k, v in dumps[0].items() if not isinstance(v, list | dict)
                     and len({json.dumps(d.get(k)) for d in dumps}) > 1]
        chosen: list[str] = []
        for name in differing if len(group) > 1 else []:
            chosen.append(name)
            if len({tuple(json.dumps(d[k]) for k in chosen) for d in dumps}) == len(dumps):
                break
        for candidate, dump in zip(group, dumps, strict=True):
            parts = [variant] if variant else []  # a space without variants: its fields alone
            labels[candidate.key] = " ".join([*parts, *(f"{k}={short_value(dump[k])}" for k in chosen)]) or candidate.key
    if len(set(labels.values())) < len(labels):  # no scalar field tells them apart: their keys do
        labels = {key: f"{label} {key}" for key, label in labels.items()}
    return labels


def _variants(space: SearchSpace) -> dict[str, int]:
    """What a comparison may name in the space: each candidate's label (one candidate each)
    and each variant's name, with how many candidates it has."""
    counts: dict[str, int] = {}
    for candidate in plan(space).candidates:
        counts[candidate.variant] = counts.get(candidate.variant, 0) + 1
    return {**counts, **dict.fromkeys(candidate_labels(space).values(), 1)}


def _pairs(doc: StudyFile, spaces: dict[str, SearchSpace], file: str) -> list[Pair]:
    planned = {name: _variants(space) for name, space in spaces.items()}
    pairs: list[Pair] = []
    for i, comparison in enumerate(doc.comparisons):
        key = f"comparisons.{i}"
        of = [comparison.of] if isinstance(comparison.of, str) else comparison.of
        base_sweep = comparison.vs_sweep or comparison.sweep
        for sweep, field in ((comparison.sweep, "sweep"), (base_sweep, "vs_sweep")):
            if sweep not in planned:
                raise UserError(f"no sweep {sweep!r} in the study ({did_you_mean(sweep, planned)}"
                                f"sweeps: {', '.join(planned)})", file=file, key=f"{key}.{field}")
        for variant, field in [*((v, "of") for v in of), (comparison.vs, "vs")]:
            sweep = base_sweep if field == "vs" else comparison.sweep
            _check_variant(variant, sweep, planned[sweep], file, f"{key}.{field}")
        for variant in of:
            pair = Pair(comparison.sweep, variant, base_sweep, comparison.vs, comparison.family)
            if pair in pairs or (variant == comparison.vs and base_sweep == comparison.sweep):
                raise UserError(f"{pair.label}: compared twice, or with itself", file=file, key=f"{key}.of")
            pairs.append(pair)
    return pairs


def _check_variant(variant: str, sweep: str, variants: dict[str, int], file: str, key: str) -> None:
    if variant not in variants:
        raise UserError(f"sweep {sweep!r} plans no variant {variant!r} ({did_you_mean(variant, variants)}"
                        f"its variants: {', '.join(variants) or 'none'})", file=file, key=key)
    if variants[variant] != 1:
        named = [name for name in variants if name.startswith(f"{variant} ")]
        raise UserError(f"variant {variant!r} of sweep {sweep!r} has {variants[variant]} candidates: "
                        f"name one ({', '.join(repr(n) for n in named)})", file=file, key=key)


def _decision(rule: Rule, index: int, pairs: list[Pair], quantity: str, file: str, many: bool) -> Decision:
    key = f"decide.{index}" if many else "decide"
    if rule.quantity != quantity:
        raise UserError(f"{rule.quantity!r} is not a quantity the report computes "
                        f"({did_you_mean(rule.quantity, [quantity])}it computes: {quantity})",
                        file=file, key=f"{key}.quantity")
    found = RULE.fullmatch(rule.rule)
    if not found or found[1] not in FIELDS:
        raise UserError(f"{rule.rule!r} is not FIELD OP NUMBER (FIELD one of {', '.join(FIELDS)}; "
                        "OP one of < <= > >=), e.g. 'upper < 0'", file=file, key=f"{key}.rule")
    matches = [p for p in pairs if p.of == rule.of and p.vs == rule.vs
               and (rule.sweep is None or p.sweep == rule.sweep)]
    if len(matches) != 1:
        made = "; ".join(p.label for p in pairs)
        why = "names no comparison the study makes" if not matches else "matches several comparisons: give sweep:"
        raise UserError(f"{rule.of!r} vs {rule.vs!r} {why} (comparisons: {made})", file=file, key=f"{key}.of")
    return Decision(matches[0], rule.quantity, found[1], found[2], float(found[3]), rule.rule.strip(),
                    rule.holds, rule.fails)
