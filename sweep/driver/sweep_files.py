"""A sweep's own small files beside its results: the space it ran (`space.yaml`), how it ran
(`sweep.json`, so `resume NAME` runs it again), the noise-aware ASHA's decisions
(`asha.json`) and adaptive seeds' looks (`looks.json`, shapesweep.results.adaptive), written
and read through the results store. Imports no Ray: `status` reads them too."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

from pydantic import TypeAdapter, ValidationError

from shapesweep.common import UserError
from shapesweep.results.adaptive import LOOKS_FILE
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.sweep_folders import unknown_sweep
from shapesweep.search_spaces.safe_yaml import parse_yaml
from shapesweep.search_spaces.space import SearchSpace, parse_space
from shapesweep.search_spaces.space_errors import branchless
from shapesweep.sweep.options.sweep_options import SweepOptions

OPTIONS_FILE = "sweep.json"  # how the sweep was run, so `resume NAME` can run it again
SPACE_FILE = "space.yaml"
DECISIONS_FILE = "asha.json"  # the noise-aware ASHA's decisions, beside the sweep's results
__all__ = ["COMPLETEP_KEY", "COMPLETEP_RULE", "DECISIONS_FILE", "LOOKS_FILE", "OPTIONS_FILE", "SPACE_FILE",
           "check_completep_rule", "check_saved_space", "load_options", "space_hash"]  # LOOKS_FILE: adaptive seeds' looks (results.adaptive)
# What `depth_mup: completep` meant when the sweep started, kept in its options file: from
# 97b324d on, Dey et al.'s L / L_base rule; before, CompleteP over residual branches (now
# `completep-subblocks`), and the options file has no such key.
COMPLETEP_KEY, COMPLETEP_RULE = "completep_rule", "dey-2025"


def load_options(root: str, name: str, model: type[SweepOptions] = SweepOptions) -> SweepOptions:
    """The options a sweep was started with (for `resume`), its space resolved under `root`:
    a copied or moved root resumes with its own copy of the space. A sweep whose `completep`
    meant another rule than today's is refused (`check_completep_rule`)."""
    check_completep_rule(root, name)
    store = ParquetStore(root)
    path = store.file_location(name, OPTIONS_FILE)
    try:
        text = store.read_file(name, OPTIONS_FILE)
        if text is None and name in store.sweeps():
            raise UserError("the sweep has results but no options file to resume it with: "
                            "`run` its space again under the same --name", file=path)
        if text is None:
            raise unknown_sweep(name, root)
        options = TypeAdapter(model).validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(branchless(first["loc"]))
        raise UserError(f"not a sweep options file ({first['msg']}); "
                        f"{store.file_repair(name, OPTIONS_FILE)}", file=path,
                        key=where or None) from None
    except (OSError, ValueError) as error:  # unreadable
        raise UserError(f"cannot read: {error}", file=path) from None
    # The space is the copy kept in the sweep folder, named relative to it (sweeps from
    # before this stored an absolute path: only its file name counts).
    options.space = store.file_location(name, PurePosixPath(options.space).name)
    options.root = root  # not saved (a moved root resumes); older files named it absolutely
    return options


def check_completep_rule(root: str, name: str) -> None:
    """Refuse to resume, under today's `completep`, a sweep that started when `completep` was
    CompleteP over residual branches: its options file has no `COMPLETEP_KEY` and its saved
    space names `depth_mup: completep` (its trials ran the rule now `completep-subblocks`)."""
    store = ParquetStore(root)
    try:
        saved = json.loads(store.read_file(name, OPTIONS_FILE) or "{}")
        space = parse_yaml(store.read_file(name, SPACE_FILE) or "{}", SPACE_FILE)
    except (OSError, ValueError, UserError):
        return  # load_options and the space's own checks say what is wrong with them
    if isinstance(saved, dict) and COMPLETEP_KEY not in saved and _names_completep(space):
        raise UserError(
            f"sweep {name!r} started before `depth_mup: completep` became Dey et al.'s L / L_base "
            "rule: its trials ran CompleteP over residual branches, now `completep-subblocks`, and "
            "resuming would mix the two; run its space again under a new --name (with "
            "`completep-subblocks` to continue the rule it ran)", file=store.file_location(name, SPACE_FILE),
            key="depth_mup")


def _names_completep(node: object) -> bool:
    """Whether a parsed space sets `depth_mup: completep` anywhere (its train, a variant's)."""
    if isinstance(node, dict):
        return any((k == "depth_mup" and v == "completep") or _names_completep(v) for k, v in node.items())
    return isinstance(node, list) and any(_names_completep(v) for v in node)


def check_saved_space(name: str, saved_text: str | None, space: SearchSpace) -> None:
    """Refuse a sweep folder that holds another space's trials (one copied from another root,
    or a catalog that lost its row): `status` reads the choice seeds and the baseline from
    the saved space, so mixing two spaces' trials would mislabel them."""
    if saved_text is None or saved_text == space.source_text:
        return
    try:
        saved_hash = space_hash(saved_text)
    except UserError:
        saved_hash = "unreadable"
    if saved_hash != space.space_hash:
        raise UserError(
            f"sweep {name!r} already holds trials of a different search space (its "
            f"{SPACE_FILE} has hash {saved_hash[:12]}; this one is {space.space_hash}): choose "
            f"another --name for this space, or finish the existing sweep with "
            f"`shapesweep resume {name}`", key="name")


def space_hash(text: str) -> str:
    """The hash this version gives a space's YAML text (a saved one, read without running code)."""
    return parse_space(parse_yaml(text, SPACE_FILE), text, SPACE_FILE).space_hash
