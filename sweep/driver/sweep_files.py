"""A sweep's own small files beside its results: the space it ran (`space.yaml`), how it ran
(`sweep.json`, so `resume NAME` runs it again) and the noise-aware ASHA's decisions
(`asha.json`), written and read through the results store. Imports no Ray: `status` reads
them too."""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import TypeAdapter, ValidationError

from shapesweep.common import UserError
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.sweep_folders import unknown_sweep
from shapesweep.search_spaces.safe_yaml import parse_yaml
from shapesweep.search_spaces.space import SearchSpace, parse_space
from shapesweep.sweep.cli.sweep_options import SweepOptions

OPTIONS_FILE = "sweep.json"  # how the sweep was run, so `resume NAME` can run it again
SPACE_FILE = "space.yaml"
DECISIONS_FILE = "asha.json"  # the noise-aware ASHA's decisions, beside the sweep's results


def load_options(root: str, name: str, model: type[SweepOptions] = SweepOptions) -> SweepOptions:
    """The options a sweep was started with (for `resume`), its space resolved under `root`:
    a copied or moved root resumes with its own copy of the space."""
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
        where = ".".join(map(str, first["loc"]))
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
