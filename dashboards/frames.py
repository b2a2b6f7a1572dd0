"""Shared preparation of results DataFrames for the figures: labels, hover text, seed means,
and the layout helpers every figure module uses. Family names, colours and series come
from the family specs (`shapesweep.families`), never from a list kept here.

Every string that reaches a plot passes through `esc`: plotly renders a whitelist of
HTML tags in text, so names are entity-escaped to show `<script>` as text, never markup.
"""

from __future__ import annotations

import functools
import html
import json

import numpy as np
import pandas as pd

from shapesweep.common import human  # noqa: F401 (figures and scaling take it from here)
from shapesweep.families import base
from shapesweep.families.base import HOVER, candidate_label, shape_text  # noqa: F401 (figures take them from here)
from shapesweep.families.base import value as _val
from shapesweep.results.stats import (
    HIGHER_IS_BETTER,
    ROLE_COLUMN,
    canonical_tuned,
    canonical_tuned_column,
    tuned_stats,
)

METRIC_LABELS = {"val_loss": "validation loss", "best_val_loss": "best validation loss",
                 "val_ppl": "validation perplexity", "psnr": "PSNR (dB)", "ssim": "SSIM"}
LOWER_IS_BETTER = {metric: metric not in HIGHER_IS_BETTER for metric in METRIC_LABELS}
NO_INTERVAL = "n<2: no verdict"  # a difference over one paired seed: a point, no interval
VERDICT_COLORS = {"better": "#2a9d3a", "worse": "#d62728", "within noise": "#8c8c8c", NO_INTERVAL: "#c7b9a0"}
OTHER_TUNED_COLOR = "#b8bcc4"  # a candidate's tuned values that were not its best
BASELINE = base.baseline()  # the LM family the others are compared to (its spec says so)
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f"]


AXIS = dict(gridcolor="#ebedf0", linecolor="#c8ccd2", zerolinecolor="#d5d8dc", automargin=True)
TEMPLATE = dict(layout=dict(paper_bgcolor="white", plot_bgcolor="white", colorway=PALETTE,
                            font=dict(family="system-ui, sans-serif", size=12, color="#2a3f5f"),
                            xaxis=AXIS, yaxis=AXIS, hoverlabel=dict(align="left")))  # small and white


def trace(kind: str, **props) -> dict:
    """A plotly trace of type `kind` ("scatter", "bar", ...) as the plain dict the page takes:
    unset (None) properties left out, pandas columns as numpy arrays, as plotly's own figure
    objects hold them (those check and deep-copy every point: seconds at 50,000 trials)."""
    out = {k: v.to_numpy() if isinstance(v, pd.Series | pd.Index) else v for k, v in props.items() if v is not None}
    return {**out, "type": kind}


def trace_type(kind: str):
    """`trace` of one type, called as plotly's classes are: `Scatter(x=..., y=...)`."""
    return functools.partial(trace, kind)


class Figure:
    """A plotly figure as plain dicts (`data`: traces, `layout`), with the few plotly.py
    methods the figures use; `to_dict` is what plotly.js draws."""

    def __init__(self, layout: dict | None = None, grid: tuple[int, int] = (1, 1)):
        self.data: list[dict] = []
        self.layout: dict = layout if layout is not None else {"template": TEMPLATE}
        self.grid = grid  # (rows, cols) of subplots, numbered row by row as plotly numbers them

    @classmethod
    def subplots(cls, rows: int, cols: int, horizontal_spacing: float | None = None,
                 vertical_spacing: float | None = None, shared_yaxes: bool = False,
                 subplot_titles: tuple[str, ...] | list[str] = ()) -> Figure:
        """A grid of subplots, numbered row by row from the top left, laid out as plotly's
        `make_subplots` lays them out, to the last bit of each domain (`test_figures` holds
        it to that), without building a plotly figure: a third of a second a report."""
        across = 0.2 / cols if horizontal_spacing is None else horizontal_spacing
        down = 0.3 / rows if vertical_spacing is None else vertical_spacing
        width, height = (1.0 - across * (cols - 1)) / cols, (1.0 - down * (rows - 1)) / rows
        fig = cls(grid=(rows, cols))
        for row in range(1, rows + 1):
            below = rows - row  # plotly stacks the rows up from the bottom
            bottom = sum([height] * below) + below * down
            for col in range(1, cols + 1):
                left = sum([width] * (col - 1)) + (col - 1) * across
                n = fig._subplot(row, col)
                fig.layout[f"xaxis{n}"] = {"anchor": f"y{n}", "domain": [left, left + width]}
                fig.layout[f"yaxis{n}"] = {"anchor": f"x{n}", "domain": [_unit(bottom), _unit(bottom + height)]}
                if shared_yaxes and col > 1:  # each row's axes follow its first one
                    fig.layout[f"yaxis{n}"].update(matches=f"y{fig._subplot(row, 1)}", showticklabels=False)
        for i, title in enumerate(subplot_titles):
            if title:
                x = fig.layout[f"xaxis{fig._subplot(i // cols + 1, i % cols + 1)}"]["domain"]
                y = fig.layout[f"yaxis{fig._subplot(i // cols + 1, i % cols + 1)}"]["domain"]
                fig.add_annotation(y=y[1], xref="paper", x=sum(x) / 2.0, yref="paper", text=title, showarrow=False,
                                   font=dict(size=16), xanchor="center", yanchor="bottom")
        return fig

    def add_trace(self, trace: dict, row: int | None = None, col: int | None = None) -> None:
        if row is not None:
            n = self._subplot(row, col if col is not None else 1)
            trace = {**trace, "xaxis": f"x{n}", "yaxis": f"y{n}"}
        self.data.append(trace)

    def update_layout(self, **props) -> None:
        _merge(self.layout, props)

    def update_xaxes(self, row: int | None = None, col: int | None = None, **props) -> None:
        for name in self._axes("xaxis", row, col):
            _merge(self.layout.setdefault(name, {}), props)

    def update_yaxes(self, row: int | None = None, col: int | None = None, **props) -> None:
        for name in self._axes("yaxis", row, col):
            _merge(self.layout.setdefault(name, {}), props)

    def add_hline(self, y: float, line: dict) -> None:
        self.layout.setdefault("shapes", []).append(
            dict(line=line, type="line", x0=0, x1=1, xref="x domain", y0=y, y1=y, yref="y"))

    def add_vrect(self, x0: float, x1: float, **props) -> None:
        self.layout.setdefault("shapes", []).append(
            dict(props, type="rect", x0=x0, x1=x1, xref="x", y0=0, y1=1, yref="y domain"))

    def add_annotation(self, **props) -> None:
        self.layout.setdefault("annotations", []).append(props)

    def to_dict(self) -> dict:
        return {"data": self.data, "layout": self.layout}

    def _subplot(self, row: int, col: int) -> str:
        n = (row - 1) * self.grid[1] + col
        return "" if n == 1 else str(n)

    def _axes(self, prefix: str, row: int | None, col: int | None) -> list[str]:
        return [prefix + self._subplot(r, c) for r in range(1, self.grid[0] + 1) for c in range(1, self.grid[1] + 1)
                if row in (None, r) and col in (None, c)]


def _unit(value: float) -> float:
    """A domain end a rounding error outside [0, 1] put back on its edge, as plotly does."""
    return 0.0 if -0.01 < value < 0.0 else 1.0 if 1.0 < value < 1.01 else value


def _merge(into: dict, props: dict) -> None:
    """plotly's `update`: nested dicts merged key by key, anything else replaced."""
    for key, value in props.items():
        if isinstance(value, dict):  # copied: one dict given to several axes stays theirs alone
            _merge(into[key] if isinstance(into.get(key), dict) else into.setdefault(key, {}), value)
        else:
            into[key] = value


def layout(fig: Figure, title: str, x: str, y: str, log_x: bool = False) -> Figure:
    # The legend is a list below the plot, one entry per line, and the figure grows to hold
    # it: at any width every series stays visible (a legend that scrolls hides some).
    shown = sum(1 for t in fig.data if t.get("showlegend") is not False and t.get("name"))
    shown += len({(t.get("legendgrouptitle") or {}).get("text") for t in fig.data} - {None})  # group titles
    legend_px = LEGEND_LINE_PX * shown + 10 if shown else 0
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=14)), hovermode="closest",
                      height=430 + legend_px, margin=dict(l=60, r=40, t=45, b=60 + legend_px),
                      modebar=dict(orientation="v"),  # at the right edge, clear of the title
                      showlegend=shown > 0,
                      legend=dict(orientation="v", x=0, xanchor="left", y=0, yanchor="bottom",
                                  yref="container", font=dict(size=11), tracegroupgap=2,
                                  maxheight=legend_px + 20))
    # SI prefixes (G, not plotly's default B), as `human` writes them in labels and tables
    scale: dict[str, str] = {"type": "log"} if log_x else {}
    fig.update_xaxes(None, None, title=dict(text=x), exponentformat="SI", **scale)
    fig.update_yaxes(title=dict(text=y), exponentformat="SI")
    if log_x:
        _log_ticks(fig)
    return fig


LEGEND_LINE_PX = 22  # an 11 px legend entry and the gap between groups


def _log_ticks(fig) -> None:
    """Log-axis ticks at 1, 2 and 5 per decade labelled in full (`human`: 20, 2K, 5M);
    plotly's own minor labels write 20 as a bare "2"."""
    xs = np.concatenate([np.asarray(t["x"], dtype=float) for t in fig.data
                         if t.get("x") is not None and len(t["x"])
                         and np.asarray(t["x"]).dtype.kind in "fiu"] or [np.array([])])
    xs = xs[np.isfinite(xs) & (xs > 0)]
    if not len(xs):
        return
    lo, hi = xs.min(), xs.max()
    for steps in ((1,), (1, 2, 5), (1, 2, 3, 5, 7)):  # the fewest that still read as an axis
        decades = range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1)
        ticks = [m * 10.0 ** d for d in decades for m in steps]
        inside = [t for t in ticks if lo / 1.1 <= t <= hi * 1.1]
        if len(inside) >= 3:
            break
    fig.update_xaxes(tickmode="array", tickvals=inside, ticktext=[human(t) for t in inside])


def point_data(frame: pd.DataFrame) -> np.ndarray:
    """customdata [row id, hover text] per point; an object array skips plotly's slow
    per-element validation of nested lists (seconds at 10,000 trials)."""
    out = np.empty((len(frame), 2), dtype=object)
    out[:, 0] = frame["row_id"].to_numpy()
    out[:, 1] = frame["hover"].to_numpy()
    return out


def esc(value: object) -> str:
    return html.escape(str(value), quote=False)


def present(frame: pd.DataFrame, column: str) -> bool:
    return column in frame and frame[column].notna().any()


def language_models() -> list[str]:
    """The registered language-model families (the LM figures' rows)."""
    return [spec.name for spec in base.specs() if spec.task.reads_tokens]


def compared_families() -> list[str]:
    """The language-model families a U-curve compares with the baseline: every other one."""
    return [spec.name for spec in base.specs() if spec.task.reads_tokens and not spec.baseline]


def ratio_families() -> list[str]:
    """The families whose k and d_h/d_model are designed series (hourglass-ffn's figures)."""
    return [spec.name for spec in base.specs() if spec.ratio_series]


def width_profiled() -> list[str]:
    """The families whose layers have widths of their own (a width profile figure)."""
    return [spec.name for spec in base.specs() if spec.shows_widths]


def constant_width(row) -> bool:
    """Whether a row's layers are all one width, as its family's spec says (any row of an
    unknown family: yes)."""
    spec = base.find(row["family"])
    return spec.constant_width(row) if spec else True


def design(row: dict) -> str:
    """The series a candidate belongs to: its family, split as its spec says (hourglass-mlp's two
    MLP designs, xformer's width shapes and non-default resize methods)."""
    spec = base.find(row["family"])
    return spec.series(row) if spec else str(row["family"])


def color(name: str, index: int = 0) -> str:
    colors = {series: c for spec in base.specs() for series, c in spec.colors.items()}
    return colors.get(name, PALETTE[index % len(PALETTE)])


DERIVED_HOVER = ("ffn_ratio", "width_depth_ratio", "avg_layer_width")  # after the fields marked
# Stored(hover=True) in any registered family (`shapesweep.families.base.HOVER`)


def hover_text(row: dict) -> str:
    """The full shape of a candidate plus its costs, for plot hover labels (escaped)."""
    return _hover_title(row, candidate_label(row)) + "<br>" + _hover_body(row)


def _hover_title(row: dict, label: str) -> str:
    """The line that names the trial: its sweep, its candidate's name (`candidate_label`), its seed."""
    return _hover_title_start(row["sweep"], label) + esc(_seed_text(row.get("seed")))


def _seed_text(seed: float | None) -> str:  # a float column's: NaN where a row has none
    return str(int(seed)) if seed is not None and seed == seed else "-"


@functools.lru_cache(maxsize=4096)
def _hover_title_start(sweep: str, label: str) -> str:
    """`_hover_title` up to the seed: the same for a sweep's trials of one candidate."""
    return f"<b>{esc(sweep)}</b> · {esc(label)} · seed "


def _hover_body(row: dict) -> str:
    """The rest: the candidate's shape and costs and the trial's tuned values, the same for
    every trial of one (candidate key, tuned values)."""
    lines = []
    fields = []
    spec = base.find(row["family"])
    inert = spec.inert_fields(row) if spec else frozenset()
    for name in (*HOVER, *DERIVED_HOVER):
        value = _val(row, name)
        if value is not None and name not in inert:
            fields.append(f"{name}={value:.3g}" if isinstance(value, float) else f"{name}={esc(value)}")
    for start in range(0, len(fields), 4):
        lines.append(" ".join(fields[start:start + 4]))
    widths = row.get("widths")
    if spec and spec.shows_widths and widths is not None and len(widths):
        lines.append("widths=" + esc(" ".join(str(int(w)) for w in widths)))
    tuned = json.loads(canonical_tuned(row.get("tuned_json")))
    if tuned:
        lines.append("tuned " + esc(" ".join(f"{k}={v}" for k, v in tuned.items())))
    lines.append(f"params {human(_val(row, 'params_total'))} total, "
                 f"{human(_val(row, 'params_non_embedding'))} non-emb; "
                 f"{human(_val(row, 'flops_per_token'))} FLOPs/token")
    return "<br>".join(lines)


def python_strings(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its text columns as Python strings: the figures select and join rows many
    times over, and a take or join of Arrow-backed strings (pandas' default) costs several
    times more. Built in one step: `astype` by column leaves a block per column, and pandas
    then warns of a fragmented frame at every later insert."""
    text = [name for name, kind in frame.dtypes.items() if kind == "str"]
    if not text:
        return frame
    strings = pd.DataFrame({name: frame[name].astype(object) for name in text}, index=frame.index)
    return pd.concat([frame.drop(columns=text), strings], axis=1)[list(frame.columns)]


TEXT_DERIVED = ("design", "hover", "hover_body", "shape_text", "label", "reason")  # Python strings


def with_derived(trials: pd.DataFrame) -> pd.DataFrame:
    """Row ids, series names, training FLOPs, hover text (`hover`, and `hover_body`: all but its
    first line, which names the trial) and why a trial did not complete (`reason`), computed
    once per report."""
    frame = python_strings(trials.reset_index(drop=True))
    row_id = np.arange(len(frame))
    # One record per candidate key and tuned values: its seeds share series, shape and hover
    # body (a trial without a key is its own); plain dicts are far faster than iterrows
    shared = frame.groupby(["key", "tuned_json"], dropna=False, sort=False).ngroup().to_numpy()
    shared = np.where(frame["key"].isna(), -1 - row_id, shared)
    first, of = np.unique(shared, return_index=True, return_inverse=True)[1:]
    records = _records(frame.iloc[first])
    bodies = np.array([_hover_body(row) for row in records], dtype=object)
    labels = np.array([candidate_label(row) for row in records], dtype=object)
    hover = [_hover_title({"sweep": sweep, "seed": seed}, label) + "<br>" + body
             for sweep, seed, label, body in zip(frame["sweep"], frame["seed"].tolist(), labels[of],
                                                 bodies[of], strict=True)]
    derived = {
        "row_id": row_id,
        "training_flops": frame["flops_per_token"].astype(float) * frame["tokens"].astype(float),
        "design": np.array([design(row) for row in records], dtype=object)[of],
        "hover_body": bodies[of],
        "hover": np.array(hover, dtype=object),
        "shape_text": np.array([shape_text(row) for row in records], dtype=object)[of],
        "label": labels[of],
        "reason": np.array(trial_reasons(frame), dtype=object),
    }
    # joined in one step (an insert a column at a time fragments the frame: pandas warns)
    columns = list(dict.fromkeys([*frame.columns, *derived]))
    added = pd.DataFrame({name: pd.Series(values, index=frame.index, dtype=object if name in TEXT_DERIVED else None)
                          for name, values in derived.items()})
    return pd.concat([frame.drop(columns=[c for c in derived if c in frame]), added], axis=1)[columns]


def _records(frame: pd.DataFrame) -> list[dict]:
    """`frame.to_dict("records")`, the same values, from one list per column: pandas boxes
    each value on its own (a third of a second for 8,400 candidates of 70 columns)."""
    columns = list(frame.columns)
    return [dict(zip(columns, row, strict=True)) for row in zip(*(frame[c].tolist() for c in columns), strict=True)]


REASON_COLUMNS = ["status", "error", "tokens", "train_tokens_budget"]  # what `trial_reason` reads


def trial_reasons(trials: pd.DataFrame) -> list[str | None]:
    """`trial_reason` of each row (its few columns only: a row of every column costs seconds
    at 50,000 trials; and only the rows that did not complete: a completed one has none)."""
    unfinished = (trials["status"] != "completed").to_numpy()
    reasons: list[str | None] = [None] * len(trials)
    columns = [c for c in REASON_COLUMNS if c in trials]  # a frame built by hand may lack some
    for i, row in zip(np.flatnonzero(unfinished), trials.loc[unfinished, columns].to_dict("records"), strict=True):
        reasons[i] = trial_reason(row)
    return reasons


def trial_reason(row: dict) -> str | None:
    """Why a trial did not (yet) complete, in one line: the error's last line, where ASHA
    stopped it, how far a running one is; None for a completed trial."""
    tokens, budget = (row.get(c) for c in ("tokens", "train_tokens_budget"))
    tokens = None if tokens is None or tokens != tokens else tokens
    budget = None if budget is None or budget != budget else budget
    if row["status"] == "failed":
        message = row.get("error")
        error = message if isinstance(message, str) and message.strip() else "failed"
        return error.strip().splitlines()[-1][:200]
    if row["status"] == "stopped_early":
        return f"stopped by ASHA at {human(tokens)} tokens" if tokens else "stopped by ASHA"
    if row["status"] == "running":
        return f"running: {human(tokens)}" + (f" of {human(budget)} tokens" if budget else " tokens")
    return None


def tuned_means(frame: pd.DataFrame, metric: str, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Completed trials averaged over seeds per (sweep, key, tuned value): `mean`, `std`
    (ddof=1; 0 for one seed, so error bars stay drawable), `n`, `chosen` (the key's result,
    `shapesweep.results.stats.tuned_stats`), and the best seed's row (its row id). A tuned
    value a seed of which ASHA stopped has no mean (the survivors' would flatter it): left out."""
    best_first = frame.sort_values(metric, ascending=LOWER_IS_BETTER[metric])
    out = tuned_stats(best_first, metric)
    out = out[~out["stopped"].astype(bool)].reset_index(drop=True)
    out["std"] = out["std"].fillna(0.0)
    if extra and len(out):
        done = best_first[(best_first["status"] == "completed") & best_first[metric].notna()]
        role = np.where(done[ROLE_COLUMN].fillna(False).astype(bool), "choice", "measure") \
            if ROLE_COLUMN in done else "measure"
        keys = ["sweep", "key", "tuned", "role"]
        means = done.assign(tuned=canonical_tuned_column(done["tuned_json"]), role=role).groupby(keys)[list(extra)].mean()
        out[list(extra)] = means.reindex(pd.MultiIndex.from_frame(out[keys])).to_numpy()
    return out


def chosen_and_others(frame: pd.DataFrame, metric: str,
                      extra: tuple[str, ...] = ()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`tuned_means` split: each candidate at its best tuned value, and the tuned values not chosen."""
    means = tuned_means(frame, metric, extra)
    chosen = means["chosen"].astype(bool)
    return means[chosen].reset_index(drop=True), means[~chosen].reset_index(drop=True)


def seed_means(frame: pd.DataFrame, metric: str, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Each candidate at its best tuned value: mean, std and count of `metric` over seeds."""
    return chosen_and_others(frame, metric, extra)[0]
