"""Declarative search spaces: YAML (a file or a built-in name) -> a validated `SearchSpace`.

A space says which model family to sweep, the budget every candidate must meet, the
fixed dimensions, the searched ones (lists or ranges) and the free dimension(s) the
solver sets so each point meets the budget. Parsing is strict: any mistake becomes
one `UserError` naming the file, the dotted key and the problem. This module reads and
checks a space; the model is `schema`, each family of checks its own module. The names
callers import from here are re-exported below.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from shapesweep.common import UserError, did_you_mean
from shapesweep.families.base import INTEGER, NUMERIC, POSITIVE
from shapesweep.search_spaces.booleans import refuse_booleans
from shapesweep.search_spaces.budget import METRICS, Budget
from shapesweep.search_spaces.family_fields import (
    DERIVED,
    constraint_names,
    moe_families,
    reference_config,
)
from shapesweep.search_spaces.limits import MAX_SEEDS, check_variants, check_work
from shapesweep.search_spaces.locations import constraint_key, written_at
from shapesweep.search_spaces.ranges import Range, SearchValues, is_categorical
from shapesweep.search_spaces.recipe_merge import ALTERNATIVES, merge_train, overlay
from shapesweep.search_spaces.safe_yaml import MAX_BYTES, parse_yaml, read_bytes, read_yaml
from shapesweep.search_spaces.schema import BASELINE_VARIANT, RESOLVED_FROM, SearchSpace
from shapesweep.search_spaces.seeds import (
    AdaptiveSeeds,
    MeasureSeeds,
    check_disjoint_seeds,
    check_seeds,
    check_seeds_option,
    fixed_seed_list,
    options_seeds,
    parse_measure_seeds,
    seed_pool,
)
from shapesweep.search_spaces.space_errors import user_error
from shapesweep.search_spaces.tune_checks import check_sweep_trials, check_tune
from shapesweep.search_spaces.tuning import CHOICE_SEEDS, UNTUNABLE, tuned_json, tuned_tag
from shapesweep.search_spaces.variant_checks import check_variant
from shapesweep.search_spaces.variants import Resolved, Variant

__all__ = [
    "ALTERNATIVES", "BASELINE_VARIANT", "BUILTIN_DIR", "CHOICE_SEEDS", "DERIVED", "INTEGER",
    "MAX_SEEDS", "METRICS", "NUMERIC", "POSITIVE", "RESOLVED_FROM", "UNTUNABLE", "AdaptiveSeeds",
    "Budget", "MeasureSeeds", "Range", "Resolved", "SearchSpace", "SearchValues", "Variant",
    "check_disjoint_seeds", "check_seeds", "check_seeds_option", "check_sweep_trials",
    "constraint_key", "constraint_names", "fixed_seed_list", "is_categorical", "list_builtin",
    "load_space", "merge_train", "moe_families", "options_seeds", "overlay", "parse_measure_seeds",
    "parse_space", "reference_config", "seed_pool", "tuned_json", "tuned_tag", "written_at",
]

BUILTIN_DIR = Path(__file__).parent / "builtin"


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
    import pyarrow as pa  # lazy: only an object-store root needs it
    import pyarrow.fs as pafs

    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        with fs.open_input_stream(path) as stream:
            data: bytes = stream.read(MAX_BYTES + 1)
            return data
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


def parse_space(doc: object, text: str = "", file: str = "<space>") -> SearchSpace:
    """Validate an already-loaded YAML document (see `load_space`)."""
    if not isinstance(doc, dict):
        raise UserError("a space must be a YAML mapping", file=file)
    refuse_booleans(SearchSpace, doc, file)
    try:
        space = SearchSpace.model_validate(doc)
    except ValidationError as error:
        raise user_error(error, file) from None
    space._source_text = text or yaml.safe_dump(doc, sort_keys=False)
    space._source_file = file
    check_variants(sum(len(f) if isinstance(f := v.family or space.family, list) else 1
                       for v in space.variants or [Variant()]), file)
    _check_variant_trains(space, file)
    check_work(space.resolved(), file, "variants" if space.variants else "search")
    check_tune(space, file)
    for variant in space.resolved():
        check_variant(space, variant, file)
    return space


def _check_variant_trains(space: SearchSpace, file: str) -> None:
    """Each variant's `train:` merged over the space's must be a valid recipe."""
    for i, variant in enumerate(space.variants or []):
        try:
            merge_train(space.train, variant.train)
        except ValidationError as error:
            raise user_error(error, file, f"variants[{i}].train") from None
