"""Reading a candidate file (`plan --out`, `export`, `train --save`): the one document that
`train`, the checkpoints and the exporters all start from."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from shapesweep.common import UserError, did_you_mean
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.booleans import refuse_booleans
from shapesweep.search_spaces.configs import FAMILIES, TrainConfig, make_config
from shapesweep.search_spaces.safe_yaml import read_yaml


def _validation_error(error, file: str, prefix: str, fields) -> UserError:
    """The first problem as one line; a typo'd key (not one of `fields`) with the field meant."""
    errors = error.errors()  # a typo'd key explains its "field required" twin, so report it first
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = ".".join(str(part) for part in first["loc"])
    problem = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        name = str(first["loc"][-1])
        problem = f"unknown key {name!r} ({did_you_mean(name, fields)}allowed: {', '.join(fields)})"
    return UserError(problem, file=file, key=f"{prefix}.{loc}" if loc else prefix)


def load_candidate(path: str | Path):
    """(model_config, TrainConfig) from a candidate YAML/JSON as `plan`/`export` write it.

    `{"family": ..., "model": {shape fields}, "train": {...}}`; other top-level keys
    (metrics, provenance, accounting) are ignored. A flat candidate (shape fields at the top
    level, like one row of `plan --format json`) is accepted too: only the family's fields
    are read from it.
    """
    file = str(path)
    if not Path(path).is_file():
        raise UserError("candidate file not found", file=file)
    doc = read_yaml(path)
    if not isinstance(doc, dict):
        raise UserError("expected a mapping with keys family, model and train", file=file)
    model = doc.get("model", None)
    family = doc.get("family") or (model.get("family") if isinstance(model, dict) else None)
    if not isinstance(family, str) or family not in FAMILIES:
        raise UserError(f"unknown family {family!r}; {did_you_mean(family, FAMILIES)}expected one "
                        f"of {', '.join(FAMILIES)}", file=file, key="family")
    if model is None:
        model = {k: v for k, v in doc.items() if k in FAMILIES[family].model_fields}
    elif not isinstance(model, dict):
        raise UserError("expected a mapping of shape fields", file=file, key="model")
    train_fields = doc.get("train") or {}
    if not isinstance(train_fields, dict):
        raise UserError("expected a mapping of training settings", file=file, key="train")
    refuse_booleans(FAMILIES[family], model, file, "model")
    refuse_booleans(TrainConfig, train_fields, file, "train")
    try:
        config = make_config({**model, "family": family})
    except ValidationError as error:
        fields = [f for f in FAMILIES[family].model_fields if f != "family"]
        raise _validation_error(error, file, "model", fields) from error
    try:
        recipe = TrainConfig.model_validate(train_fields)
    except ValidationError as error:
        raise _validation_error(error, file, "train", list(TrainConfig.model_fields)) from error
    try:
        return config, recipe.for_model(config, account(config, recipe.seq_len).params_total)
    except ValueError as error:
        raise UserError(str(error), file=file, key="train.lr_base_d_model") from error
