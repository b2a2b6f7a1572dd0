"""The dashboard's data: one JSON payload (figures + rows) that the page renders.

The offline report embeds the payload and plotly.js in one HTML file; the live server
hands the same payload out over HTTP. One payload and one page script for both keeps
what a user sees in the report and the live dashboard the same.

A little over 400 lines: the payload's parts (figures, rows, hover text) are built
from one pass over the store and must agree with each other.
"""

from __future__ import annotations

import base64
import json
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from plotly.io.json import to_json_plotly

from shapesweep.common import UserError, human
from shapesweep.dashboards.comparisons import compare_sweeps, comparison_tables
from shapesweep.dashboards.figures import applicable_figures, metric_for
from shapesweep.dashboards.frames import (
    LOWER_IS_BETTER,
    METRIC_LABELS,
    language_models,
    python_strings,
    with_derived,
)
from shapesweep.dashboards.page import render_page
from shapesweep.dashboards.views import analysis_views
from shapesweep.results.live import live_sweeps, load_live, with_running
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.roles import with_seed_roles
from shapesweep.results.stats import budget_clusters
from shapesweep.results.store import (
    FragmentCache,
    list_sweeps,
    load_curves,
    load_layers,
    load_trials,
    validate_sweep_name,
)
from shapesweep.search_spaces.configs import parse_count


def load_frames(root: str, sweeps: list[str] | None, cache=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Trials and curves of `sweeps` (None = all), the running trials among them (status
    `running`, their live curves: `shapesweep.results.live`); an unknown sweep is a UserError.
    `cache`: a shapesweep.results.store.FragmentCache (the live server's), to read only new fragments."""
    stored = list_sweeps(root)
    known = sorted({*stored, *live_sweeps(root)})
    for name in sweeps or []:
        validate_sweep_name(name)
        if name not in known:
            hint = f"known sweeps: {', '.join(known)}" if known else "the store holds no sweeps yet"
            raise UserError(f"no sweep named {name!r} in {root} ({hint})", key="NAME")
    landed = [s for s in sweeps if s in stored] if sweeps is not None else None
    trials = load_trials(root, landed, cache=cache)
    curves = load_curves(root, landed, cache=cache)
    trials, curves = with_running(trials, curves, *load_live(root, sweeps if sweeps is not None else known))
    return with_seed_roles(trials, root), curves  # a choice seed's trials enter no mean


def budget_labels(trials: pd.DataFrame, max_groups: int = 8) -> pd.Series:
    """Group trials into parameter budgets: clusters of non-embedding params, else log bins.

    The clusters are `shapesweep.results.stats.budget_clusters`, the groups that pair candidates with
    their own budget's baseline.
    """
    params = trials["params_non_embedding"].astype(float).fillna(trials["params_total"].astype(float))
    if params.isna().all():
        return pd.Series("all", index=trials.index)
    order = params.sort_values().dropna()
    cluster = budget_clusters(trials).reindex(order.index)
    if cluster.max() + 1 <= max_groups:  # the group's range where it is wider than 2%
        labels = order.groupby(cluster).transform(
            lambda p: f"≈{human(p.median())}" if p.max() <= 1.02 * p.min()
            else f"{human(p.min())}–{human(p.max())}")
    else:
        edges = np.geomspace(order.min(), order.max() * 1.0001, 7)
        bins = np.digitize(order, edges[1:-1])
        labels = pd.Series([f"{human(edges[b])}–{human(edges[b + 1])}" for b in bins], index=order.index)
    return labels.reindex(trials.index).fillna("unknown")


def _catalog(root: str, storage: str | None = None) -> dict[str, dict]:
    """Space name and status per sweep from the catalog (`storage`'s, else the root's own
    when it has one)."""
    if storage is None and ("://" in str(root) or not ParquetStore(root).has_own_catalog()):
        return {}
    from shapesweep.results.catalog import Catalog, default_catalog_url  # SQLAlchemy: 0.3 s

    try:
        return {r.name: {"space": r.space_name, "status": r.status}
                for r in Catalog(storage or default_catalog_url(root)).list()}
    except Exception:  # noqa: BLE001 - a catalog we cannot read only loses the header's space names
        return {}


def _clean(value):
    if isinstance(value, float | np.floating) and not math.isfinite(value):
        return None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def build_payload(root: str, sweeps: list[str] | None = None, title: str | None = None,
                  version: str = "", cache=None, frames: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                  adjust: str | None = None, storage: str | None = None) -> str:
    """The JSON the page renders: sweeps, filter values, per-trial rows, figures. `frames`:
    the (trials, curves) `load_frames` gave, where the caller needs them too (the live server);
    `adjust`: the verdicts' family adjustment (shapesweep.results.multiplicity; default Holm)."""
    trials, curves = frames if frames is not None else load_frames(root, sweeps, cache)
    trials = with_derived(trials)
    trials["budget"] = budget_labels(trials) if len(trials) else []
    vision = (~trials["family"].isin(language_models())).to_numpy() if len(trials) else np.array([], bool)
    vision_metric = metric_for(trials[vision]) if vision.any() else "psnr"
    metric_names = np.where(vision, vision_metric, "val_loss")
    catalog = _catalog(root, storage)
    names = sorted(trials["sweep"].unique()) if len(trials) else list(sweeps or [])
    rows = {
        "sweep": trials["sweep"].tolist(), "trial_id": trials["trial_id"].tolist(),
        "family": trials["family"].tolist(), "design": trials["design"].tolist(),
        "budget": trials["budget"].tolist(), "seed": trials["seed"].tolist(),
        "status": trials["status"].tolist(),
        "metric_name": metric_names.tolist(),
        "metric": _typed(_metric_values(trials, metric_names)),  # the top table's 4 decimals, the export's value
        # Shown with 3 digits (`human`): float32 holds 7.
        "val_ppl": _typed(trials["val_ppl"].to_numpy(np.float32, na_value=np.nan)),
        "params_non_embedding": _typed(trials["params_non_embedding"].to_numpy(np.float32, na_value=np.nan)),
        "training_flops": _typed(trials["training_flops"].to_numpy(np.float32, na_value=np.nan)),
        "label": trials["label"].tolist(),
        "error": [None if not isinstance(e, str) else e for e in trials["error"]],
        "reason": trials["reason"].tolist(),
    }
    rows["doc"], rows["train"], docs, trains = _split_configs(trials["config_json"])
    counts = trials.groupby(["sweep", "status"]).size() if len(trials) else pd.Series(dtype=int)
    sweep_info = [{"name": n, **catalog.get(n, {}),
                   "counts": {s: int(counts.get((n, s), 0))
                              for s in ("completed", "stopped_early", "failed", "running")}}
                  for n in names]
    head = {
        "title": title or "shapesweep: " + (", ".join(names) or "no sweeps yet"), "version": version,
        "sweeps": sweep_info, "families": sorted(set(trials["family"])),
        "budgets": sorted(set(rows["budget"]), key=_budget_order),
        "metrics": [{"name": m, "label": METRIC_LABELS[m], "lower_is_better": LOWER_IS_BETTER[m]}
                    for m in dict.fromkeys(metric_names.tolist())],
        "rows": rows, "docs": docs, "trains": trains,
    }
    rows["hover"] = trials["hover_body"].tolist()  # the page adds the title (`expand`)
    for name in CODED:
        rows[name] = _coded(rows[name])
    curves = python_strings(curves)
    compared = compare_sweeps(trials, adjust) if len(trials) else {}  # the tables' and the vs-baseline figure's
    head["comparisons"] = comparison_tables(trials, root, compared)
    figures = applicable_figures(trials, curves, load_layers(root, sweeps, cache=cache), compared) if len(trials) else []
    figures += analysis_views(trials) if len(trials) else []
    hover = trials["hover"].to_numpy()
    parts = [{"id": fid, "figure": _lean(fig, hover)} for fid, fig in figures]
    shared = _share(parts)
    return (json.dumps(head, default=str)[:-1] + f', "shared": {to_json_plotly(shared)}, "figures": ['
            + ", ".join(f'{{"id": {json.dumps(p["id"])}, "figure": {to_json_plotly(p["figure"])}}}'
                        for p in parts) + "]}")


def _metric_values(trials: pd.DataFrame, metric_names: np.ndarray) -> np.ndarray:
    """Each trial's value of its own metric (`metric_names`, one per row), NaN where missing."""
    values = np.full(len(trials), np.nan)
    for name in dict.fromkeys(metric_names.tolist()):
        rows = metric_names == name
        values[rows] = trials[name].to_numpy(np.float64, na_value=np.nan)[rows]
    return values


CODED = ("sweep", "family", "design", "budget", "status", "metric_name", "hover", "label",
         "error", "reason")  # columns of few distinct values: seeds and tuned values share them


def _coded(values: Sequence | np.ndarray) -> dict:
    """A column of few distinct values as {"values", "codes"}: each value travels once (the
    page expands it, `expand`)."""
    codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=False)
    return {"values": [_clean(v) for v in uniques], "codes": _typed(codes.astype(np.min_scalar_type(len(uniques))))}


def _typed(values: np.ndarray) -> dict:
    """A numpy array as plotly.js's typed array {"dtype", "bdata"} (base64 of its bytes): a
    float32 in 5.3 bytes, a small code in 1.3, where JSON text takes up to 20. Missing: NaN."""
    return {"dtype": np.dtype(values.dtype).str[1:], "bdata": base64.b64encode(values.tobytes()).decode("ascii")}


def _untyped(value: dict) -> list:
    """`_typed`'s list, NaN as None (as the page's `decode` gives it)."""
    values = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype("<" + value["dtype"]))
    return [None if v != v else v for v in values.tolist()]


def expand(rows: dict) -> dict:
    """A payload's rows as plain lists, as the page's `expand` makes them (hover texts less
    their title), for Python readers of the payload."""
    def plain(value):
        if isinstance(value, dict) and "codes" in value:
            return [value["values"][c] for c in plain(value["codes"])]
        return _untyped(value) if isinstance(value, dict) else value
    return {k: plain(v) for k, v in rows.items()}


def _split_configs(config_json: pd.Series) -> tuple[list, list, list, list]:
    """Candidate documents deduplicated for transport: the seeds of one shape share a
    document, and most trials share a train block (it differs by seed only)."""
    doc_ids: dict[str, int] = {}
    train_ids: dict[str, int] = {}
    docs: list[object] = []
    trains: list[object] = []
    doc_of: list[int | None] = []
    train_of: list[int | None] = []
    parsed: dict[str, object] = {}  # each distinct part's document, None where its text is not canonical
    for text in config_json:
        if not isinstance(text, str):
            doc_of.append(None)
            train_of.append(None)
            continue
        body, train = _config_parts(text, parsed)
        doc_of.append(doc_ids.setdefault(body, len(doc_ids)))
        train_of.append(train_ids.setdefault(train, len(train_ids)))
        if len(docs) < len(doc_ids):  # a part `_canonical` checked is parsed already
            docs.append(json.loads(body) if parsed.get(body) is None else parsed[body])
        if len(trains) < len(train_ids):
            trains.append(json.loads(train) if parsed.get(train) is None else parsed[train])
    return doc_of, train_of, docs, trains


TRAIN = ', "train": '


def _config_parts(text: str, parsed: dict) -> tuple[str, str]:
    """A config's document less its train block, and the train block, each as canonical JSON
    (`json.dumps(..., sort_keys=True)`). A stored config is such a text (`results.rows`), its
    train block last: cut there rather than parsed (seconds at 50,000 trials), where both
    parts are canonical texts, each distinct part checked once in `parsed`."""
    at = text.rfind(TRAIN)  # `, "` occurs in no JSON string: the key of some object
    if at > 1 and text.endswith("}"):
        body, train = text[:at] + "}", text[at + len(TRAIN):-1]
        if isinstance(_canonical(body, parsed), dict) and "train" not in parsed[body] \
                and _canonical(train, parsed) is not None:
            return body, train
    doc = json.loads(text)
    train = json.dumps(doc.pop("train", None), sort_keys=True)
    return json.dumps(doc, sort_keys=True), train


def _canonical(text: str, parsed: dict):
    """The document `text` holds if `text` is its canonical JSON, else None (memoised in `parsed`)."""
    if text not in parsed:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        parsed[text] = doc if doc is not None and json.dumps(doc, sort_keys=True) == text else None
    return parsed[text]


def _lean(fig, hover: np.ndarray) -> dict:
    """A figure (`frames.Figure`) as the page takes it, in the fewest bytes: each point's hover
    text stays in the rows (customdata carries the row id only; the page restores the text,
    `decodeTrace`), coordinates and error bars travel as float32 (7 digits, more than any hover
    shows) unless a hover prints them unformatted, x and texts of few distinct values as codes,
    and every other array typed (`_typed_arrays`)."""
    return {"data": [_lean_trace(trace, hover) for trace in fig.data], "layout": _typed_arrays(fig.layout)}


def _lean_trace(trace: dict, hover: np.ndarray) -> dict:
    trace = dict(trace)
    row_ids = _row_ids(trace.get("customdata"), hover)
    if row_ids is not None:
        trace["customdata"] = row_ids.astype(np.min_scalar_type(max(len(hover) - 1, 0)))
        meta = trace.get("meta")
        trace["meta"] = {**(meta if isinstance(meta, dict) else {}), "ids": True}
    template = str(trace.get("hovertemplate") or "")
    for axis in ("x", "y"):
        if f"%{{{axis}}}" not in template and axis in trace:
            trace[axis] = _float32(trace[axis])
    if (trace.get("error_y") or {}).get("array") is not None:
        trace["error_y"] = bars = dict(trace["error_y"])
        for side in ("array", "arrayminus"):
            if side in bars:
                bars[side] = _float32(bars[side])
    x = trace.get("x")
    for owner, key in ((trace, "text"), (trace.get("marker") or {}, "color")):
        if _repeats(owner.get(key)):
            if owner is not trace:
                trace["marker"] = owner = dict(owner)
            owner[key] = _coded(owner[key])
    if isinstance(x, np.ndarray) and x.dtype.kind in "fiu" and len(x) >= FEW_OF \
            and len(np.unique(x)) <= 256:  # a curve's evaluation points: one byte each
        trace["x"] = _coded(x)
    return _typed_arrays(trace)


def _typed_arrays(value):
    """`value` with its numeric numpy arrays as typed arrays (`_typed`), 64-bit integers in the
    fewest of 8, 16 or 32 bits (plotly.js has no 64-bit arrays), as plotly.py sends them."""
    if isinstance(value, dict):
        return {k: _typed_arrays(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_typed_arrays(v) for v in value]
    if not isinstance(value, np.ndarray) or not value.size:
        return value
    if value.dtype == np.int64:
        fits = [t for t in (np.int8, np.int16, np.int32)
                if np.iinfo(t).min <= value.min() and value.max() <= np.iinfo(t).max]
        value = value.astype(fits[0]) if fits else value
    return _typed(value) if value.dtype.str[1:] in TYPED else value


TYPED = ("i1", "u1", "i2", "u2", "i4", "u4", "f4", "f8")  # plotly.js's typed arrays


FEW_OF = 64  # points from which an x of few distinct values travels as one-byte codes


def _row_ids(customdata, hover: np.ndarray) -> np.ndarray | None:
    """The row ids of a `frames.point_data` customdata ([row id, that row's hover text] per
    point), or None when it is anything else."""
    if isinstance(customdata, list | tuple) and customdata and all(
            isinstance(p, list | tuple) and len(p) == 2 for p in customdata):
        customdata = np.array(customdata, dtype=object)
    if not isinstance(customdata, np.ndarray) or customdata.ndim != 2 or customdata.shape[1] != 2 \
            or not len(customdata) or customdata.dtype != object:
        return None
    try:
        ids = customdata[:, 0].astype(np.int64)
    except (TypeError, ValueError):
        return None
    if ids.min() < 0 or ids.max() >= len(hover) or not (ids == customdata[:, 0]).all():
        return None
    return ids if (hover[ids] == customdata[:, 1]).all() else None


def _float32(values):
    """Numbers as a float32 array (a list or float64 array of them), anything else as it is."""
    if isinstance(values, list | tuple) and len(values) and all(
            isinstance(v, float | int) and not isinstance(v, bool) for v in values):
        values = np.asarray(values, dtype=np.float64)
    if isinstance(values, np.ndarray) and values.dtype == np.float64:
        return values.astype(np.float32)
    return values


def _repeats(values) -> bool:
    """A list of strings with fewer distinct values than entries (a coded column is smaller)."""
    return isinstance(values, list | tuple) and len(values) > 1 and all(isinstance(v, str) for v in values) \
        and len(set(values)) < len(values)


def _share(figures: list[dict]) -> list:
    """Arrays several traces carry (the Pareto figures' y, error bars, row ids and texts, one
    per cost axis) once, in the payload's `shared`: each trace holds {"shared": index}."""
    def slots():
        for figure in figures:
            for trace in figure["figure"]["data"]:
                bars, marker = trace.get("error_y") or {}, trace.get("marker") or {}
                for owner, key in ((trace, "x"), (trace, "y"), (trace, "customdata"), (trace, "text"),
                                   (bars, "array"), (bars, "arrayminus"), (marker, "color"), (marker, "size")):
                    if key in owner and not isinstance(owner[key], str | int | float | None):
                        yield owner, key, json.dumps(owner[key], default=str)

    counts: dict[str, int] = {}
    for _, _, text in slots():
        counts[text] = counts.get(text, 0) + 1
    shared: list[str] = []
    index: dict[str, int] = {}
    for owner, key, text in slots():
        if counts[text] > 1 and len(text) > SHARED_MIN:
            if text not in index:
                index[text] = len(shared)
                shared.append(owner[key])
            owner[key] = {"shared": index[text]}
    return shared


SHARED_MIN = 64  # bytes from which an array repeated across traces travels once


def _budget_order(label: str) -> float:
    text = label.lstrip("≈").split("–")[0]
    try:
        return float(parse_count(text.replace("G", "B")))
    except ValueError:
        return math.inf


def script_safe(payload: str) -> str:
    """JSON that cannot end its <script> element early (`</script>` inside a sweep's error)."""
    return payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def write_report(root: str, sweeps: list[str], out: str | Path, adjust: str | None = None,
                 storage: str | None = None) -> Path:
    """One self-contained HTML file (plotly.js embedded, opens offline), written atomically;
    `adjust`, `storage` (the catalog's URL, `--storage`): as `build_payload`'s."""
    import plotly.offline

    cache = FragmentCache()  # each fragment read once: curves and layers need the trials again
    page = render_page(script_safe(build_payload(root, sweeps, cache=cache, adjust=adjust, storage=storage)), plotly_js=plotly.offline.get_plotlyjs())
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(page)
        os.chmod(temp, 0o666 & ~_umask())  # as any new file (mkstemp's is private, 0600)
        os.replace(temp, out)
    except BaseException:
        os.unlink(temp)
        raise
    return out


def _umask() -> int:
    """The process umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
