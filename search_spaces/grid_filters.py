"""Which rows of a solved grid may become candidates: built-in validity (whole positive
sizes, heads dividing the width, ...) and the space's own constraint expressions."""

from __future__ import annotations

import numpy as np

from shapesweep.common import UserError
from shapesweep.families.base import INTEGER, POSITIVE
from shapesweep.search_spaces.configs import FAMILIES
from shapesweep.search_spaces.expressions import compile_expression
from shapesweep.search_spaces.family_fields import constraint_names
from shapesweep.search_spaces.free_dims import Columns, default, get, wide
from shapesweep.search_spaces.locations import constraint_key
from shapesweep.search_spaces.schema import SearchSpace
from shapesweep.search_spaces.variants import Resolved


def valid(family: str, cols: Columns, n: int) -> np.ndarray:
    """Built-in validity: positive whole dims, divisible heads, even head_dim (RoPE), no more
    active experts than experts."""
    ok = np.ones(n, dtype=bool)
    for dim in POSITIVE:
        x = cols.get(dim)
        if x is None or isinstance(x, str | bool):
            continue
        x = np.asarray(x, dtype=float)
        ok &= np.isfinite(x) & (x > 0)
        if dim in INTEGER:
            ok &= x == np.round(x)
    if "n_heads" not in FAMILIES[family].model_fields:
        return ok  # no attention heads to divide the width
    d_model, n_heads = np.asarray(get(family, cols, "d_model")), np.asarray(cols.get("n_heads", 1))
    head_dim = cols.get("head_dim")
    if head_dim is None:
        ok &= np.mod(d_model, n_heads) == 0
        head_dim = np.floor_divide(d_model, n_heads)
    ok &= np.mod(head_dim, 2) == 0
    if cols.get("n_kv_heads") is not None:
        ok &= np.mod(n_heads, cols["n_kv_heads"]) == 0
    if cols.get("n_experts") is not None and cols.get("n_active_experts") is not None:
        ok &= np.asarray(cols["n_active_experts"]) <= np.asarray(cols["n_experts"])
    return ok


def constraints(space: SearchSpace, v: Resolved, cols: Columns, n: int) -> list[tuple[str, np.ndarray]]:
    """Evaluate the space's expressions (`shapesweep.search_spaces.expressions`, checked when the space
    was loaded) over the candidate columns: one (expression, mask of rows meeting it) each."""
    masks: list[tuple[str, np.ndarray]] = []
    if not v.constraints:
        return masks
    names = dict(cols)
    width = wide(v)
    names.setdefault("ffn_ratio", np.asarray(cols["d_h"]) / np.asarray(cols[width]))
    names.setdefault("width_depth_ratio", np.asarray(cols[width]) / np.asarray(cols["n_layers"]))
    names.setdefault("avg_layer_width", cols[width])  # one width in every layer
    names.setdefault("params_frozen", 0)
    if "n_heads" in FAMILIES[v.family].model_fields:
        for dim in ("head_dim", "n_kv_heads"):
            if names.get(dim) is None:
                names[dim] = (np.floor_divide(cols["d_model"], cols["n_heads"]) if dim == "head_dim"
                              else cols["n_heads"])
    for dim in FAMILIES[v.family].model_fields:
        names.setdefault(dim, default(v.family, dim))
    allowed = constraint_names(v.family)
    for i, text in enumerate(v.constraints):
        try:
            masks.append((text, compile_expression(text, allowed).evaluate(names, n)))
        except Exception as error:  # noqa: BLE001 - any evaluation failure is the user's expression
            raise UserError(f"cannot evaluate {text!r}: {error}", file=space.source_file,
                            key=constraint_key(space, v, i)) from None
    return masks
