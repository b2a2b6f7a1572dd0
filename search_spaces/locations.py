"""Where in the YAML the user wrote a resolved variant's setting, for one-line errors."""

from __future__ import annotations

from shapesweep.search_spaces.schema import SearchSpace
from shapesweep.search_spaces.variants import Resolved


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


def constraint_key(space: SearchSpace, v: Resolved, i: int) -> str:
    """Where constraint i of a resolved variant was written: the space's, then the variant's."""
    if i < len(space.constraints):
        return f"constraints[{i}]"
    return f"variants[{v.origin}].constraints[{i - len(space.constraints)}]"
