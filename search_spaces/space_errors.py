"""A pydantic `ValidationError` over a space file -> the one `UserError` the user reads:
the dotted key, the problem, and for an unknown key the nearest allowed one."""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from shapesweep.common import UserError, did_you_mean
from shapesweep.search_spaces.budget import Budget
from shapesweep.search_spaces.configs import TrainConfig
from shapesweep.search_spaces.ranges import Range
from shapesweep.search_spaces.schema import SearchSpace
from shapesweep.search_spaces.seeds import AdaptiveSeeds
from shapesweep.search_spaces.variants import Variant

# A union (list | Range, list | AdaptiveSeeds) reports one error per branch; the type mismatch
# of the branch the user did not mean is noise, and so is the branch's name in the key.
_OTHER_BRANCH = ("list_type", "model_type", "dict_type")
_BRANCH_NAMES = ("list[", "function-", "Range", "AdaptiveSeeds", "dict[")


def user_error(error: ValidationError, file: str, prefix: str = "") -> UserError:
    """The first problem worth reading: an unknown key before anything else (a misspelt
    `budjet:` is also a missing `budget:`, and only the typo has a did-you-mean)."""
    errors = error.errors()
    meant = [e for e in errors if e["type"] not in _OTHER_BRANCH] or errors
    unknown = [e for e in meant if e["type"] == "extra_forbidden"]
    first = (unknown or meant)[0]
    loc = branchless(first["loc"])
    key = ".".join([prefix, *loc] if prefix else loc)
    if first["type"] == "extra_forbidden":
        model = TrainConfig if prefix else model_at(loc[:-1])
        allowed = ", ".join(model.model_fields) if model else "see DESIGN.md"
        hint = did_you_mean(loc[-1], model.model_fields) if model else ""
        return UserError(f"unknown key {loc[-1]!r} ({hint}allowed: {allowed})", file=file, key=key)
    return UserError(first["msg"].removeprefix("Value error, "), file=file, key=key)


def branchless(loc: tuple[int | str, ...]) -> list[str]:
    """A pydantic error's location without the union branches' names (`seeds.list[int]` -> `seeds`)."""
    return [str(p) for p in loc if not str(p).startswith(_BRANCH_NAMES)]


def model_at(loc: list[str]) -> type[BaseModel] | None:
    """The model whose keys sit at `loc` of a space file (None: a free mapping)."""
    top: dict[str, type[BaseModel]] = {"budget": Budget, "train": TrainConfig, "variants": Variant,
                                       "seeds": AdaptiveSeeds}
    if not loc:
        return SearchSpace
    if loc[0] in top:
        return top[loc[0]]
    if loc[0] == "search":
        return Range
    return None
