"""Plotly figures, each a pure function of results DataFrames (None when it does not apply).

Inputs are `frames.with_derived(load_trials(...))` and `load_curves(...)`. Points are
candidates at their best tuned value, the mean over seeds with the std as error bars
(`shapesweep.results.stats`); the tuned values a candidate did not choose are drawn grey. Every trace
carries `meta` the report's filters read: `{"sweep", "family"}` for trace-level toggling,
and `{"rows": true}` when `customdata[i][0]` is the row id of point i (filtered per point).

Why one module of this length: one short pure function per figure, side by side, so
the report's figure list reads in one place; each is independent of the others.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from shapesweep.common import UserError
from shapesweep.dashboards.frames import (
    BASELINE,
    LOWER_IS_BETTER,
    METRIC_LABELS,
    NO_INTERVAL,
    OTHER_TUNED_COLOR,
    VERDICT_COLORS,
    Figure,
    candidate_label,
    chosen_and_others,
    color,
    compared_families,
    constant_width,
    esc,
    human,
    language_models,
    layout,
    point_data,
    present,
    ratio_families,
    seed_means,
    trace_type,
    width_profiled,
)
from shapesweep.dashboards.scaling import scaling_figure
from shapesweep.results.stats import (
    FIDELITY_THRESHOLD,
    canonical_tuned_column,
    compare,
    rank_fidelity,
    stable_fraction,
)

Scatter = trace_type("scatter")
Scattergl = trace_type("scattergl")
Bar = trace_type("bar")

X_AXES = {
    "params_non_embedding": "non-embedding parameters",
    "params_total": "total parameters",
    "training_flops": "training FLOPs",
    "kv_cache_per_token": "KV cache per token (elements)",
    "wall_time_s": "wall time (s)",
    # hourglass-mlp counts W_in in its Pareto parameters, trained or fixed (`params_total` holds the trainable ones).
    "params_incl_frozen": "parameters incl. W_in (trainable + fixed)",
}
LM_X_AXES = [x for x in X_AXES if x != "params_incl_frozen"]  # an LM freezes nothing
MANY_POINTS = 4000  # above this, WebGL traces keep the browser responsive


def _scatter(n_points: int):
    return Scattergl if n_points > MANY_POINTS else Scatter


def _series_name(parts: list, sweeps: int, sweep: str) -> str:
    name = " ".join(esc(p) for p in parts)
    return f"{name} · {esc(sweep)}" if sweeps > 1 else name


def metric_for(trials: pd.DataFrame) -> str:
    """PSNR for image-MLP sweeps (hourglass-mlp), validation loss for language models."""
    lm = trials["family"].isin(language_models()).any()
    return "val_loss" if lm or not present(trials, "psnr") else "psnr"


def pareto_front(x: np.ndarray, y: np.ndarray, lower_is_better: bool = True) -> np.ndarray:
    """Indices of the points no other point beats with less or equal x (sorted by x)."""
    order = np.lexsort((y if lower_is_better else -y, x))
    best, keep = np.inf, []
    for i in order:
        value = y[i] if lower_is_better else -y[i]
        if value < best:
            best = value
            keep.append(i)
    return np.array(keep, dtype=int)


SEED_COSTS = ("training_flops", "wall_time_s")  # costs that differ between seeds: averaged


def pareto_points(trials: pd.DataFrame, metric: str = "val_loss") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The candidates (and tuned values not chosen) every Pareto figure of `trials` plots,
    `SEED_COSTS` averaged over seeds: computed once for the figures of all cost axes."""
    return chosen_and_others(trials, metric, extra=tuple(c for c in SEED_COSTS if c in trials))


def pareto_figure(trials: pd.DataFrame, x: str = "params_non_embedding", metric: str = "val_loss",
                  points: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> Figure | None:
    """hourglass-mlp's frontier: metric vs a cost, one frontier per family, mean ± std over seeds
    (`points`: `pareto_points(trials, metric)`, when several figures share them)."""
    means, others = points or pareto_points(trials, metric)
    means = means[means[x].notna() & (means[x] > 0)] if x in means else means.iloc[0:0]
    if len(means) < 2 or (x in PARAM_AXES and iso_budget(means)):
        return None  # one point is no frontier; at one budget the x-range is rounding noise
    fig, n_sweeps, lower = Figure(), means["sweep"].nunique(), LOWER_IS_BETTER[metric]
    _other_tuned_trace(fig, others[others[x].notna() & (others[x] > 0)] if x in others else others, x)
    _stopped_trace(fig, trials, x, metric)
    trace = _scatter(len(means))
    sweeps_per_design = means.groupby("design")["sweep"].nunique()
    counted = x == "params_incl_frozen"  # say what the trainable part is, beside the counted one
    for i, ((sweep, series), group) in enumerate(means.groupby(["sweep", "design"], sort=True)):
        name = _series_name([series], n_sweeps, sweep)
        # A design's own colour, unless it is in several sweeps: then each gets one of its own.
        c = color(series if sweeps_per_design[series] == 1 else "", i)
        fig.add_trace(trace(
            x=group[x], y=group["mean"], mode="markers", name=name, legendgroup=name, showlegend=False,
            marker=dict(color=c, size=7, opacity=0.55),
            error_y=error_bars(group, c), text=_hover_extra(group, counted),
            customdata=point_data(group), hovertemplate="%{customdata[1]}<br>%{y:.4g}%{text}<extra></extra>",
            meta={"rows": True}))
        front = group.iloc[pareto_front(group[x].to_numpy(float), group["mean"].to_numpy(float), lower)]
        fig.add_trace(Scatter(
            x=front[x], y=front["mean"], mode="lines+markers", line=dict(color=c, width=2.5, shape="hv"),
            marker=dict(size=9, color=c, line=dict(color="white", width=1)), name=name,
            legendgroup=name, customdata=point_data(front),
            hovertemplate="frontier<br>%{customdata[1]}<br>%{y:.4g}<extra></extra>",
            meta={"sweep": sweep, "family": group["family"].iloc[0]}))
    title = f"Pareto frontier: {METRIC_LABELS[metric]} vs {X_AXES[x]}"
    return layout(fig, title, X_AXES[x], METRIC_LABELS[metric], log_x=True)


PARAM_AXES = ("params_non_embedding", "params_total")
SEARCHED = ("width_depth_ratio", "n_layers", "d_model", "ffn_ratio", "k", "d_h", "n_heads", "head_dim",
            "beta", "alpha", "n_experts", "shape", "activation")


def iso_budget(means: pd.DataFrame) -> bool:
    """Whether the candidates' parameters differ by no more than the budget tolerance (twice
    the largest budget error, at least 1%): then parameters are no axis to plot against."""
    params = means["params_non_embedding"].astype(float).dropna()
    if params.empty:
        return False
    error = means["budget_error"].astype(float).abs().max() if "budget_error" in means else np.nan
    spread = (params.max() - params.min()) / params.median()
    return bool(spread <= max(0.01, 2 * (error if error == error else 0.0)))


def _spread_text(frame: pd.DataFrame) -> list[str]:
    """Hover text after the mean: ± the std over seeds, or that there was one seed."""
    return [f" ± {std:.2g} (n={int(n)})" if n > 1 else " (1 seed)"
            for std, n in zip(frame["std"], frame["n"], strict=True)]


def searched_figure(trials: pd.DataFrame, metric: str = "val_loss",
                    points: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> Figure | None:
    """An iso-budget sweep's result: the metric against the dimension it searched (the shape
    field with the most distinct values), one series per design, mean ± std over seeds
    (`points`: `pareto_points(trials, metric)`, when other figures share them)."""
    means, _ = points or chosen_and_others(trials, metric)
    if len(means) < 2 or not iso_budget(means):
        return None
    varying = [(means[c].nunique(), c) for c in SEARCHED if c in means and means[c].nunique() > 1]
    if not varying:
        return None
    dim = max(varying)[1]
    params = means["params_non_embedding"].astype(float)
    return _against(means, dim, metric, f"Iso-budget sweep: {METRIC_LABELS[metric]} vs {dim} "
                    f"(non-embedding params {human(params.min())}–{human(params.max())})")


BASELINE_VARIANT = "baseline"  # the variant the statistics compare with (shapesweep.results.stats.compare)
AXES = {"ffn_ratio": "d_h / d_model", "k": "k (hourglass sub-blocks)", "n_layers": "n_layers (L)",
        "width_depth_ratio": "d_model / n_layers", "beta": "beta (bottleneck position)",
        "alpha": "alpha (bottleneck width)"}  # the axes a report plots loss against, where a space varies them


def varied_axes(means: pd.DataFrame) -> list[str]:
    """The AXES the candidates of `means` (a sweep's language models at their chosen values)
    vary, widest spread first (max / min): the axis a space was built to vary leads, before an
    axis that moves with it (a d_model searched at fixed L moves d_model / L a little while d_h,
    solved to the budget, moves the FFN ratio a lot). The baseline variant is left out where
    others exist: it is one point of another family, and varies nothing by design."""
    others = means[means["variant"] != BASELINE_VARIANT] if "variant" in means else means
    rows = others if len(others) else means
    spreads = []
    for axis in AXES:
        if axis not in rows:
            continue
        values = pd.to_numeric(rows[axis], errors="coerce").dropna().round(3)
        if values.nunique() >= 2 and values.min() > 0:
            spreads.append((-float(values.max() / values.min()), list(AXES).index(axis), axis))
    return [axis for *_, axis in sorted(spreads)]


def axis_figure(trials: pd.DataFrame, axis: str, metric: str = "val_loss",
                points: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> Figure | None:
    """The metric against one of the AXES the sweep varies, one series per design, mean ± std
    over seeds; None where fewer than two candidates take two values of it."""
    means, _ = points or chosen_and_others(trials, metric)
    if len(means) < 2 or axis not in means or means[axis].dropna().nunique() < 2:
        return None
    return _against(means[means[axis].notna()], axis, metric,
                    f"{METRIC_LABELS[metric]} vs {AXES.get(axis, axis)}", AXES.get(axis, axis))


def _against(means: pd.DataFrame, dim: str, metric: str, title: str, label: str | None = None) -> Figure:
    """The metric of `means` against `dim`: a line per design and each value of its discrete
    shape fields (hourglass k 2 and k 3 are two series, never one line through both)."""
    numeric = pd.api.types.is_numeric_dtype(means[dim])
    fig, n_sweeps = Figure(), means["sweep"].nunique()
    split = [f for f in SERIES_FIELDS if f != dim and f in means
             and (means.groupby("design")[f].nunique(dropna=True) > 1).any()]
    sweeps_per_design = means.groupby("design")["sweep"].nunique()
    ordered = means.sort_values(dim).assign(**{f: means[f].astype(object) for f in split})
    lines = list(ordered.groupby(["sweep", "design", *split], sort=True, dropna=False))
    lines_per_design = pd.Series([key[1] for key, _ in lines]).value_counts()
    for i, ((sweep, series, *values), group) in enumerate(lines):
        single = sweeps_per_design[series] == 1 and lines_per_design[series] == 1
        c = color(series if single else "", i)  # two sweeps, or two series of a design: two colours
        parts = [series, *(f"{f}={_plain(v)}" for f, v in zip(split, values, strict=True) if v == v and v is not None)]
        fig.add_trace(Scatter(
            x=group[dim], y=group["mean"], mode="lines+markers" if numeric else "markers",
            name=_series_name(parts, n_sweeps, sweep), marker=dict(color=c, size=8), line=dict(color=c),
            error_y=error_bars(group, c), text=_spread_text(group), customdata=point_data(group),
            hovertemplate="%{customdata[1]}<br>%{y:.4g}%{text}<extra></extra>",
            meta={"rows": True, "sweep": sweep, "family": group["family"].iloc[0]}))
    log = numeric and means[dim].min() > 0 and means[dim].max() / means[dim].min() >= 8
    return layout(fig, title, (label or dim) + (" (log)" if log else ""), METRIC_LABELS[metric], log_x=log)


SERIES_FIELDS = ("k", "shape", "activation", "n_experts")  # discrete shape fields: a series each


def _plain(value) -> str:
    """A shape field's value as a legend writes it: 2, not 2.0."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def with_input_projection(trials: pd.DataFrame) -> pd.DataFrame:
    """`params_incl_frozen`: the trainable parameters plus a fixed W_in (hourglass-mlp's count)."""
    return trials.assign(params_incl_frozen=trials["params_total"] + trials["params_frozen"].fillna(0))


def _trainable(frame: pd.DataFrame) -> list[str]:
    return [f"{human(counted)} parameters incl. W_in, {human(trainable)} trainable"
            for counted, trainable in zip(frame["params_incl_frozen"], frame["params_total"], strict=True)]


def _hover_extra(frame: pd.DataFrame, counted: bool) -> list[str]:
    """Hover text after the mean: its spread, and (hourglass-mlp) the parameters with W_in."""
    spread = _spread_text(frame)
    return [s + f"<br>{p}" for s, p in zip(spread, _trainable(frame), strict=True)] if counted else spread


def error_bars(frame: pd.DataFrame, c: str | None = None) -> dict:
    """Error bars of seed-mean points: the std over seeds (none drawn when every n is 1)."""
    return dict(type="data", array=frame["std"].tolist(), visible=bool(len(frame) and frame["n"].max() > 1),
                thickness=1, **({"color": c} if c else {}))


def _other_tuned_trace(fig: Figure, others: pd.DataFrame, x: str) -> None:
    """The tuned values candidates did not choose (`chosen_and_others`), greyed behind the chosen points."""
    others = others[others[x].notna()] if x in others else others.iloc[0:0]
    if others.empty:
        return
    fig.add_trace(Scatter(
        x=others[x], y=others["mean"], mode="markers", name="other tuned values (not chosen)",
        marker=dict(color=OTHER_TUNED_COLOR, size=6, symbol="circle-open"),
        error_y=error_bars(others, OTHER_TUNED_COLOR), customdata=point_data(others), text=_spread_text(others),
        hovertemplate="not chosen: %{customdata[1]}<br>%{y:.4g}%{text}<extra></extra>",
        meta={"rows": True, "other_tuned": True}))


def _stopped_trace(fig: Figure, trials: pd.DataFrame, x: str, metric: str = "val_loss") -> None:
    """Trials ASHA stopped, at their loss when stopped (✕, grey): a shape the scheduler cut
    short stays visible, never silently missing from the curve."""
    stopped = trials[(trials["status"] == "stopped_early") & trials[metric].notna()] if x in trials else trials.iloc[0:0]
    stopped = stopped[stopped[x].notna() & (stopped[x] > 0)]
    if stopped.empty:
        return
    fig.add_trace(Scatter(
        x=stopped[x], y=stopped[metric], mode="markers", name="stopped by ASHA (loss when stopped)",
        marker=dict(symbol="x", size=7, color=STOPPED_COLOR), customdata=point_data(stopped),
        text=[esc(reason) for reason in stopped["reason"]],
        hovertemplate="%{text}<br>%{customdata[1]}<br>%{y:.4g}<extra></extra>",
        meta={"rows": True, "stopped": True}))


STOPPED_COLOR = "#9a9aa6"
# Each sweep's conventional baseline: the baseline's colour, dashed, for the first sweep; other
# shades of it and other dashes for the next (two sweeps of one space are told apart).
OTHER_BASELINE_SHADES = ["#c08fdc", "#46225c", "#9c6bb8"]
BASELINE_DASHES = ["dash", "dot", "dashdot", "longdash"]


def _baseline_traces(fig: Figure, trials: pd.DataFrame, x: str, x_span: tuple[float, float],
                     n_sweeps: int, sweeps, own_x: bool = False) -> None:
    """The conventional baseline of `sweeps` dashed: along x when it varies; else a horizontal
    line over `x_span`, or (`own_x`) its points at their own x."""
    base = seed_means(trials[(trials["family"] == BASELINE) & trials["sweep"].isin(sweeps)], "val_loss")
    for j, (sweep, group) in enumerate(base.groupby("sweep")):
        group = _best_per_bin(group, x)[0]
        c = color(BASELINE) if j == 0 else OTHER_BASELINE_SHADES[(j - 1) % len(OTHER_BASELINE_SHADES)]
        dash = BASELINE_DASHES[j % len(BASELINE_DASHES)]
        varies = group[x].nunique() >= 3
        points = varies or own_x
        xs = group[x] if points else list(x_span)
        ys = group["mean"] if points else [group["mean"].min()] * 2
        label = f"{BASELINE} baseline" + ("" if varies else " (at its own ratio)" if own_x else " (best)")
        fig.add_trace(Scatter(
            x=xs, y=ys, mode="lines+markers" if points else "lines",
            line=dict(color=c, dash=dash, width=2), marker=dict(symbol="diamond", size=10, color=c),
            name=_series_name([label], n_sweeps, sweep),
            error_y=error_bars(group) if points else None,
            customdata=point_data(group) if points else None,
            hovertemplate="%{customdata[1]}<br>%{y:.4g}<extra></extra>" if points else "baseline %{y:.4g}<extra></extra>",
            meta={"sweep": sweep, "family": BASELINE}))


def _ratio_groups(frame: pd.DataFrame) -> pd.Series:
    """Hourglass d_h/d_model as a series key (hourglass-ffn Fig. 4); none when solved continuously."""
    ratio = frame["ffn_ratio"].round(2).where(frame["family"].isin(ratio_families()))
    return ratio if ratio.nunique() <= 6 else pd.Series(np.nan, index=frame.index)


def _best_per_bin(group: pd.DataFrame, x: str, bins: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(line, rest): every point when x takes few values; else the best point per log-x bin,
    so a random search's cloud still reads as a curve (the rest is drawn faint)."""
    if group[x].nunique() <= 12:
        return group.sort_values(x), group.iloc[0:0]
    which = pd.cut(np.log(group[x].astype(float)), bins, labels=False)
    line = group.loc[group.groupby(which)["mean"].idxmin()].sort_values(x)
    return line, group.drop(line.index)


def ucurve_figure(trials: pd.DataFrame, tolerance: float = 0.005) -> Figure | None:
    """hourglass-ffn Fig. 4: loss vs d_model/L (log), one series per design (hourglass: per k and
    d_h/d_model), best region shaded. It is the iso-budget figure of a width/depth sweep:
    `applicable_figures` draws `searched_figure` only where there is no U-curve. The shaped
    families are compared with the conventional baseline (dashed); where they sample fewer
    than 3 ratios, each language-model family is a series of its own (none left out)."""
    means, others = chosen_and_others(lm := trials[trials["family"].isin(compared_families())], "val_loss")
    shaped = not means.empty and means["width_depth_ratio"].nunique() >= 3
    if not shaped:
        means, others = chosen_and_others(lm := trials[trials["family"].isin(language_models())], "val_loss")
        if means.empty or means["width_depth_ratio"].nunique() < 3:
            return None
    fig, n_sweeps = Figure(), means["sweep"].nunique()
    _other_tuned_trace(fig, others, "width_depth_ratio")
    _stopped_trace(fig, lm, "width_depth_ratio")
    groups = _ucurve_groups(means.sort_values("width_depth_ratio"))
    if not any(g["width_depth_ratio"].nunique() >= 2 for _, g in groups):
        return None  # points, no curve
    for i, (group_key, group) in enumerate(groups):
        sweep, family, k, ratio, shape = group_key
        by_ratio = family in ratio_families()
        parts = [family] + ([f"k={int(k)}"] if by_ratio else [])
        parts += [f"d_h/d={ratio:g}"] if by_ratio and ratio == ratio else []
        parts += [str(shape)] if isinstance(shape, str) else []
        name, c = _series_name(parts, n_sweeps, sweep), color("", i)
        line, others = _best_per_bin(group, "width_depth_ratio")
        if len(others):
            fig.add_trace(Scatter(
                x=others["width_depth_ratio"], y=others["mean"], mode="markers", legendgroup=name,
                showlegend=False, marker=dict(size=4, color=c, opacity=0.25), customdata=point_data(others),
                error_y=error_bars(others, c),
                hovertemplate="%{customdata[1]}<br>%{y:.4g}<extra></extra>", meta={"rows": True}))
        fig.add_trace(Scatter(
            x=line["width_depth_ratio"], y=line["mean"], name=name, legendgroup=name,
            mode="lines+markers" if len(line) > 1 else "markers",  # one ratio: a point, still shown
            marker=dict(size=7, color=c), line=dict(color=c, width=1.5), error_y=error_bars(line),
            customdata=point_data(line), hovertemplate="%{customdata[1]}<br>%{y:.4g}<extra></extra>",
            meta={"rows": True}))
    if shaped:
        span = (means["width_depth_ratio"].min(), means["width_depth_ratio"].max())
        _baseline_traces(fig, trials, "width_depth_ratio", span, n_sweeps, means["sweep"].unique(), own_x=True)
    drawn = means[means["sweep"].isin({group_key[0] for group_key, _ in groups})]
    for i, (sweep, group) in enumerate(drawn.groupby("sweep")):  # no band for a sweep with no curve
        _best_region(fig, trials, group, sweep, tolerance, i, n_sweeps, shaped)
    return layout(fig, "U-curve: validation loss vs width/depth ratio d_model / n_layers",
                   "d_model / n_layers (log)", METRIC_LABELS["val_loss"], log_x=True)


def _ucurve_groups(means: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """The U-curve's series: (sweep, family, k, d_h/d_model, shape). The d_h/d_model split is a
    designed series (hourglass-ffn Fig. 4: 0.25, 0.5) only where it leaves each hourglass series
    more than one ratio; a d_h solved per shape gives each its own d_h/d_model, and is no split."""
    keys = ["sweep", "family", "k", "ratio_group", "shape"]
    split = means.assign(ratio_group=_ratio_groups(means))
    groups = list(split.groupby(keys, dropna=False, sort=True))
    if any(key[1] in ratio_families() and g["width_depth_ratio"].nunique() < 2 for key, g in groups):
        groups = list(means.assign(ratio_group=np.nan).groupby(keys, dropna=False, sort=True))
    return groups


def _best_region(fig: Figure, trials: pd.DataFrame, group: pd.DataFrame, sweep: str,
                 tolerance: float, i: int, n_sweeps: int, shaped: bool) -> None:
    """Shade the ratios within `tolerance` of the curves' best, saying what it covers; a best
    at the edge of the sampled ratios gets a note instead (the optimum may lie beyond)."""
    ratios = group["width_depth_ratio"]
    best = group["mean"].min()
    near = group[group["mean"] <= best * (1 + tolerance)]["width_depth_ratio"]
    where = f" · {esc(sweep)}" if n_sweeps > 1 else ""
    if near.min() <= ratios.min() or near.max() >= ratios.max():
        edge = ratios.min() if near.min() <= ratios.min() else ratios.max()
        text = (f"best at the edge of the sampled ratios (d_model/L {edge:.3g}): "
                f"the optimum may lie beyond{where}")
        fig.add_annotation(x=np.log10(edge), y=0.995 - 0.06 * i, yref="paper", yanchor="top", text=text,
                           showarrow=False, font=dict(size=11, color="#8a6d00"),
                           xanchor="left" if edge == ratios.min() else "right")
        return
    lo, hi = near.min() / 1.08, near.max() * 1.08
    fig.add_vrect(x0=lo, x1=hi, fillcolor="#ffd54f", opacity=0.3, line=dict(width=0), layer="below")
    base = seed_means(trials[(trials["family"] == BASELINE) & (trials["sweep"] == sweep)], "val_loss")
    better = shaped and len(base) and base["mean"].min() < best
    label = (f"best region of the curves (within {tolerance:.1%} of their best"
             + ("; the baseline is better" if better else "; the baseline is not in it" if shaped else "")
             + ")" + where)
    # Annotations on a log axis take log10 coordinates (shapes take data values).
    fig.add_annotation(x=np.log10((lo * hi) ** 0.5), y=0.995 - 0.06 * i, yref="paper", yanchor="top",
                       text=label, showarrow=False, font=dict(size=11, color="#8a6d00"))


def ratio_figure(trials: pd.DataFrame) -> Figure | None:
    """hourglass-ffn Fig. 3: loss vs d_h/d_model, one series per k (the best shape at each ratio;
    the other shapes faint behind it), the baseline dashed."""
    means, others = chosen_and_others(trials[trials["family"].isin(ratio_families())], "val_loss")
    if means.empty or means["ffn_ratio"].round(3).nunique() < 2:
        return None
    fig, n_sweeps = Figure(), means["sweep"].nunique()
    _other_tuned_trace(fig, others, "ffn_ratio")
    means = means.assign(ratio=means["ffn_ratio"].round(3)).sort_values("ffn_ratio")
    for i, ((sweep, k), group) in enumerate(means.groupby(["sweep", "k"], sort=True)):
        name, c = _series_name([f"k={int(k)}"], n_sweeps, sweep), color("", i)
        best = group.loc[group.groupby("ratio")["mean"].idxmin()].sort_values("ffn_ratio")
        others = group.drop(best.index)
        if len(others):
            fig.add_trace(Scatter(
                x=others["ffn_ratio"], y=others["mean"], mode="markers", legendgroup=name, showlegend=False,
                marker=dict(size=5, color=c, opacity=0.3), customdata=point_data(others),
                error_y=error_bars(others, c),
                hovertemplate="%{customdata[1]}<br>%{y:.4g}<extra></extra>", meta={"rows": True}))
        fig.add_trace(Scatter(
            x=best["ffn_ratio"], y=best["mean"], mode="lines+markers", name=name, legendgroup=name,
            marker=dict(size=8, color=c), line=dict(color=c), error_y=error_bars(best),
            customdata=point_data(best), hovertemplate="%{customdata[1]}<br>%{y:.4g}<extra></extra>",
            meta={"rows": True}))
    _baseline_traces(fig, trials, "ffn_ratio", (means["ffn_ratio"].min(), means["ffn_ratio"].max()),
                     n_sweeps, means["sweep"].unique())
    return layout(fig, "Ratio sweep: validation loss vs d_h / d_model per k (best shape per ratio)",
                  "d_h / d_model", METRIC_LABELS["val_loss"])


def width_profile_figure(trials: pd.DataFrame, top: int = 10) -> Figure | None:
    """xformer Fig. 2's shapes: per-layer widths of the best variable-width candidates, and
    dashed each sweep's own constant-width model (its `constant` shape, else its conventional one)."""
    means = seed_means(trials[trials["family"].isin(width_profiled())], "val_loss")
    if means.empty:
        return None
    fig = Figure()
    shaped = means[~_constant_rows(means)]
    for i, (_, row) in enumerate((shaped if len(shaped) else means).nsmallest(top, "mean").iterrows()):
        widths = [int(w) for w in row["widths"]]
        shape = esc(row["shape"]) + (f" β={row['beta']:g} α={row['alpha']:g}" if row["shape"] != "constant" else "")
        name = (f"{shape} · avg width "
                f"{row['avg_layer_width']:.0f} · {human(row['flops_per_token'])} FLOPs/tok · loss {row['mean']:.3f}")
        fig.add_trace(Scatter(
            x=list(range(1, len(widths) + 1)), y=widths, mode="lines+markers", name=name,
            line=dict(color=color("", i), shape="linear"),
            customdata=[[int(row["row_id"]), row["hover"]]] * len(widths),
            hovertemplate="layer %{x}: width %{y}<br>%{customdata[1]}<extra></extra>",
            meta={"rows": True}))
    n_sweeps = means["sweep"].nunique()
    for sweep in sorted(means["sweep"].unique()):
        own = trials[trials["sweep"] == sweep]
        base = seed_means(own[own["family"].isin(width_profiled()) & _constant_rows(own)], "val_loss")
        base = base if len(base) else seed_means(own[own["family"] == BASELINE], "val_loss")
        if base.empty:
            continue
        row = base.nsmallest(1, "mean").iloc[0]
        name = _series_name([f"constant width {int(row['d_model'])} (this sweep's) · "
                             f"{human(row['flops_per_token'])} FLOPs/tok · loss {row['mean']:.3f}"], n_sweeps, sweep)
        fig.add_trace(Scatter(
            x=[1, int(row["n_layers"])], y=[row["d_model"]] * 2, mode="lines",
            line=dict(color=color(BASELINE), dash="dash"), name=name,
            customdata=[[int(row["row_id"]), row["hover"]]] * 2,
            hovertemplate="constant width %{y}<br>%{customdata[1]}<extra></extra>",
            meta={"rows": True, "sweep": sweep, "family": row["family"]}))
    return layout(fig, "Width profiles of the best variable-width candidates", "layer", "layer width")


def _constant_rows(frame: pd.DataFrame) -> pd.Series:
    """`constant_width` of every row of `frame`, as a boolean mask."""
    return pd.Series([constant_width(row) for row in frame.to_dict("records")], index=frame.index, dtype=bool)


def _layer_means(trials: pd.DataFrame, layers: pd.DataFrame | None, columns: list[str],
                 top: int) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """Per candidate (its completed seeds at its best tuned value, averaged; the `top` best by
    loss) and layer: the mean of `columns`, with `depth` = layer / n_layers; and the candidates'
    seed means. None without layer rows holding those columns."""
    if layers is None or layers.empty or layers[columns].isna().all().all():
        return None
    means = seed_means(trials[trials["family"].isin(language_models())], "val_loss").nsmallest(top, "mean")
    done = trials[trials["status"] == "completed"]
    runs = done.assign(tuned=canonical_tuned_column(done["tuned_json"])).merge(
        means[["sweep", "key", "tuned", "row_id"]].rename(columns={"row_id": "point"}),
        on=["sweep", "key", "tuned"])
    data = layers.merge(runs[["sweep", "trial_id", "point", "n_layers"]], on=["sweep", "trial_id"])
    if data.empty:
        return None
    data = data.groupby(["point", "n_layers", "layer", "threshold"], as_index=False)[columns].mean()
    data["depth"] = data["layer"] / data["n_layers"]
    return data, means


def _by_depth(trials: pd.DataFrame, data: pd.DataFrame, means: pd.DataFrame,
              panels: list[tuple[str, str, float | None]], title: str) -> Figure:
    """One panel per (column, subplot title, threshold or None: any one of a layer's rows), one
    line per candidate against depth, constant width dashed."""
    n_rows = (len(panels) + 1) // 2
    fig = Figure.subplots(n_rows, 2, subplot_titles=[name for _, name, _ in panels], vertical_spacing=0.14)
    rows = trials.set_index("row_id")
    n_sweeps = means["sweep"].nunique()
    for i, (point, group) in enumerate(data.groupby("point", sort=False)):
        row = rows.loc[point]
        name = _series_name([candidate_label(row)], n_sweeps, row["sweep"])
        c, dash = color("", i), "dash" if constant_width(row) else "solid"
        for panel, (column, _, threshold) in enumerate(panels):
            points = (group.drop_duplicates("layer") if threshold is None
                      else group[group["threshold"] == threshold]).sort_values("depth")
            fig.add_trace(Scatter(
                x=points["depth"], y=points[column], mode="lines+markers", name=name,
                legendgroup=name, showlegend=panel == 0, line=dict(color=c, dash=dash, width=2),
                marker=dict(color=c, size=6),
                customdata=[[int(point), row["hover"]]] * len(points),
                hovertemplate="layer %{x:.2f} of depth: %{y:.3f}<br>%{customdata[1]}<extra></extra>",
                meta={"rows": True, "sweep": row["sweep"], "family": row["family"]}),
                row=panel // 2 + 1, col=panel % 2 + 1)
    fig = layout(fig, title, "", "")
    fig.update_xaxes(title=dict(text="depth (layer / n_layers)"), row=n_rows)  # clear of the titles below
    fig.update_layout(height=fig.layout["height"] + 330 * (n_rows - 1), margin=dict(t=80))
    return fig


def layers_figure(trials: pd.DataFrame, layers: pd.DataFrame | None, top: int = 12) -> Figure | None:
    """xformer Fig. 7: the residual stream's matrix entropy and the MLP activation density at
    each threshold against depth (layer / n_layers), one line per candidate (its completed
    seeds at its best tuned value, averaged; the `top` best by loss), constant width dashed."""
    found = _layer_means(trials, layers, ["matrix_entropy", "activation_density"], top)
    if found is None:
        return None
    data, means = found
    thresholds = sorted(data["threshold"].unique())
    panels = [("matrix_entropy", "matrix entropy of the residual stream", None)]
    panels += [("activation_density", f"MLP activation density, |a| > {t:g}", t) for t in thresholds]
    fig = _by_depth(trials, data, means, panels,
                    "Representations by depth (xformer Fig. 7): mean over seeds; constant width dashed")
    fig.update_yaxes(rangemode="tozero")
    return fig


LENS_PANELS = [("lens_logprob", "log probability of the target token (nats)", None),
               ("lens_entropy", "entropy of the decoded distribution (nats)", None),
               ("lens_kl", "symmetrized KL to the layer before (nats)", None)]


def lens_figure(trials: pd.DataFrame, layers: pd.DataFrame | None, top: int = 12) -> Figure | None:
    """xformer Fig. 8, the logit lens: each layer's residual stream decoded through the final
    norm and unembedding; the target's log probability, the decoded entropy and the
    symmetrized KL to the previous layer's decoding against depth, as `layers_figure` draws."""
    found = _layer_means(trials, layers, [column for column, _, _ in LENS_PANELS], top)
    if found is None:
        return None
    data, means = found
    fig = _by_depth(trials, data, means, LENS_PANELS,
                    "Logit lens by depth (xformer Fig. 8): mean over seeds; constant width dashed")
    fig.update_yaxes(rangemode="tozero", row=1, col=2)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    return fig


# A legend of a few entries in one row above the plot, at its right (clear of the title): its
# y is the plot area's (`paper`), not the figure's, whose top it would be drawn beyond.
TOP_LEGEND = dict(orientation="h", yref="paper", y=1.02, yanchor="bottom", xanchor="right", x=1)


def param_split_figure(trials: pd.DataFrame, top: int = 30,
                       points: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> Figure | None:
    """hourglass-ffn's reallocation story: attention vs FFN parameters of the best candidates
    (`points`: `pareto_points` of the language models, when other figures share them)."""
    lm = trials[trials["family"].isin(language_models())]
    means = points[0] if points else seed_means(lm, "val_loss")
    if means.empty:
        return None
    best = means.nsmallest(top, "mean").reset_index(drop=True)
    labels = [f"#{i + 1} {esc(candidate_label(r))}" for i, r in best.iterrows()]
    points = point_data(best)
    fig = Figure()
    for column, name, c in (("params_attention", "attention", "#ff7f0e"), ("params_ffn", "FFN", "#1f77b4"),
                            ("params_norms", "norms", "#bcbd22")):
        fig.add_trace(Bar(x=labels, y=best[column], name=name, marker=dict(color=c), customdata=points,
                          hovertemplate=f"{name} %{{y:.4s}}<br>%{{customdata[1]}}<extra></extra>",
                          meta={"rows": True}))
    fig = layout(fig, f"Parameter split of the {len(best)} best candidates (by validation loss)",
                  "", "non-embedding parameters")
    fig.update_layout(barmode="stack", height=540,
                      legend=TOP_LEGEND)
    fig.update_xaxes(tickangle=-40, tickfont=dict(size=9))
    return fig


STATUS_STYLES = {"completed": ("solid", 1.0), "stopped_early": ("dash", 0.9), "failed": ("dot", 0.9),
                 "running": ("solid", 1.0)}
END_MARKS = {"stopped_early": "x", "failed": "circle-x", "running": "circle"}
MAX_CANDIDATE_CURVES = 40  # above this many candidates, one colour per design keeps it readable
CANDIDATE_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                    "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
                    "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363"]


def learning_curves_figure(trials: pd.DataFrame, curves: pd.DataFrame) -> Figure | None:
    """Val loss (or PSNR) vs tokens for every trial: one colour per candidate (seeds share it;
    per design above MAX_CANDIDATE_CURVES candidates); stopped trials dashed and failed ones
    dotted, each ending in a mark whose hover says why; running trials end in a dot. The
    legend groups by candidate (`legendgroup`: one click shows or hides all its curves), each
    entry saying how many curves it draws; a candidate run at several tuned values gets a
    group title and one entry per value."""
    from shapesweep.families.base import tuned_text

    metric = "psnr" if metric_for(trials) == "psnr" and present(curves, "psnr") else "val_loss"
    if curves.empty or not present(curves, metric):
        return None
    columns = ["row_id", "hover", "design", "status", "family", "key", "label", "tuned_json"]
    rows = trials.set_index(["sweep", "trial_id"])[columns]
    data = curves[curves[metric].notna()].join(rows, on=["sweep", "trial_id"], how="inner")
    if data.empty:
        return None
    data = data.assign(tuned=data["tuned_json"].map(tuned_text).fillna("")).sort_values(["sweep", "trial_id", "tokens"])
    per_candidate = data.groupby(["sweep", "key"]).ngroups <= MAX_CANDIDATE_CURVES
    series = ["sweep", "key"] if per_candidate else ["sweep", "design"]
    colours = {k: CANDIDATE_COLORS[i % len(CANDIDATE_COLORS)]
               for i, k in enumerate(data[series].drop_duplicates().itertuples(index=False, name=None))}
    values = data.groupby(series)["tuned"].nunique() if per_candidate else None  # tuned values per candidate
    unfinished = trials[trials["status"] != "completed"]
    reasons = dict(zip(zip(unfinished["sweep"], unfinished["trial_id"], strict=True), unfinished["reason"],
                       strict=True))
    fig, n_sweeps = Figure(), data["sweep"].nunique()
    trace = _scatter(len(data))
    keys = [*series, "tuned", "status"] if per_candidate else [*series, "status"]
    for parts, group in data.groupby(keys, sort=True):
        *which, tuned, status = parts if per_candidate else (*parts[:-1], "", parts[-1])
        sweep = which[0]
        # One trace per series: trials separated by a gap point keep 10,000 trials light.
        last = group.groupby("trial_id", sort=False).tail(1)
        gaps = last.assign(tokens=np.nan, **{metric: np.nan})
        joined = pd.concat([group, gaps]).sort_values(["trial_id", "tokens"], na_position="last")
        dash, opacity = STATUS_STYLES.get(status, ("solid", 1.0))
        c = colours[tuple(which)] if per_candidate or n_sweeps > 1 else color(which[1], len(fig.data))
        head = group["label"].iloc[0] if per_candidate else group["design"].iloc[0]
        head = head[:-len(tuned) - 1] if per_candidate and tuned and head.endswith(" " + tuned) else head
        count = last["trial_id"].nunique()
        what = [*([] if status == "completed" else [f"({status.replace('_', ' ')})"]),
                f"· {count} curve{'s' if count > 1 else ''}"]
        several = per_candidate and values[tuple(which)] > 1
        group_name = "/".join(map(str, which))  # the candidate's (or design's) own: labels may repeat
        name = " ".join([tuned, *what]) if several else _series_name([p for p in (head, tuned, *what) if p],
                                                                      n_sweeps, sweep)
        titled = dict(legendgrouptitle=dict(text=_series_name([head], n_sweeps, sweep))) if several else {}
        fig.add_trace(trace(
            x=joined["tokens"], y=joined[metric], mode="lines", name=name, legendgroup=group_name, **titled,
            line=dict(color=c, dash=dash, width=1.6), opacity=opacity, connectgaps=False,
            customdata=point_data(joined), hovertemplate="%{customdata[1]}<br>tokens %{x:.3s}: %{y:.4g}<extra></extra>", meta={"rows": True}))
        if status != "completed":
            why = [esc(reasons.get((sweep, t)) or status) for t in last["trial_id"]]
            fig.add_trace(trace(
                x=last["tokens"], y=last[metric], mode="markers", showlegend=False, legendgroup=group_name,
                text=why, marker=dict(symbol=END_MARKS.get(status, "circle"), size=9, color=c,
                                      line=dict(width=1.5, color=c)),
                customdata=point_data(last), name=name + " end",
                hovertemplate="<b>%{text}</b><br>%{customdata[1]}<extra></extra>", meta={"rows": True}))
    label = METRIC_LABELS[metric]
    return layout(fig, f"Learning curves ({label} vs tokens; ✕ stopped by ASHA, ⊗ failed, ● running)",
                  "tokens (log)", label, log_x=True)


def _labels(frame: pd.DataFrame, n_sweeps: int) -> list[str]:
    """One distinct x label per candidate: its name (sweep and key when needed)."""
    labels = [_series_name([candidate_label(row)], n_sweeps, row["sweep"]) for row in frame.to_dict("records")]
    seen = pd.Series(labels).duplicated(keep=False).to_numpy()
    return [f"{label} #{key[:6]}" if twin else label
            for label, key, twin in zip(labels, frame["key"], seen, strict=True)]


def baseline_figure(trials: pd.DataFrame, metric: str = "val_loss",
                    compared: dict | None = None) -> Figure | None:
    """Each candidate minus its sweep's `baseline` variant, paired over seeds, with its
    family-adjusted t-interval (`shapesweep.results.stats.compare`; the hover gives the raw 95%
    one too); colour = the adjusted verdict, n<2 candidates have no bar (and no verdict); an
    unresolved one's hover gives the seeds that would resolve it.
    `compared`: the sweeps' `compare` already made (`comparisons.compare_sweeps`)."""
    parts = []
    for sweep, group in trials.groupby("sweep"):
        done = (compared or {}).get((sweep, metric))
        try:
            if done is None:
                done = compare(group, metric)
            elif isinstance(done, UserError):
                raise done
        except UserError:  # several baselines per budget: `status --format table` says why
            continue
        parts.append(done[done["delta_vs_baseline"].notna() & (done["key"] != done["baseline_key"])])
    data = pd.concat(parts).copy() if parts else pd.DataFrame()  # copy: one block, not 70
    if data.empty:
        return None
    data = data.sort_values(["sweep", "delta_vs_baseline"], ascending=[True, LOWER_IS_BETTER[metric]])
    data = data.assign(label=_labels(data, data["sweep"].nunique()),
                       verdict=data["verdict"].fillna(NO_INTERVAL))
    delta = data["delta_vs_baseline"].astype(float)
    high = data["ci_high_adjusted"].astype(float).fillna(data["ci_high"].astype(float))
    low = data["ci_low_adjusted"].astype(float).fillna(data["ci_low"].astype(float))
    data["plus"] = (high - delta).fillna(0.0)
    data["minus"] = (delta - low).fillna(0.0)
    adjusted = [f" · {a} p {q:.2g} [{lo:+.4f}, {hi:+.4f}]" if q == q else ""
                for a, q, lo, hi in zip(data["adjust"], data["p_adjusted"].astype(float), low, high, strict=True)]
    data["text"] = [f"Δ {d:+.4f}, raw 95% CI [{lo:+.4f}, {hi:+.4f}]{adj} · {v} · {int(n)} paired seeds"
                    + (f" · {int(need)} would resolve it (80% power)" if need == need and need else "")
                    if lo == lo else f"Δ {d:+.4f} · {v}"
                    for d, lo, hi, adj, v, n, need in zip(
                        delta, data["ci_low"].astype(float), data["ci_high"].astype(float), adjusted,
                        data["verdict"], data["n_paired"], data["seeds_for_80pct_power"].astype(float), strict=True)]
    fig = Figure()
    for verdict, c in VERDICT_COLORS.items():
        group = data[data["verdict"] == verdict]
        if group.empty:
            continue
        fig.add_trace(Scatter(
            x=group["label"], y=group["delta_vs_baseline"].astype(float), mode="markers", name=verdict,
            marker=dict(color=c, size=8), text=group["text"].tolist(),
            error_y=dict(type="data", symmetric=False, array=group["plus"].tolist(),
                         arrayminus=group["minus"].tolist(), color=c, thickness=1.5),
            customdata=point_data(group), hovertemplate="%{customdata[1]}<br>%{text}<extra></extra>",
            meta={"rows": True, "verdict": verdict}))
    fig.add_hline(y=0, line=dict(color="#2a3f5f", width=1.5))
    fig = layout(fig, f"vs baseline: {METRIC_LABELS[metric]} difference, paired over seeds "
                 "(family-adjusted CI: hover for the raw 95% one)",
                 "", f"Δ {METRIC_LABELS[metric]} vs the baseline variant")
    fig.update_xaxes(tickangle=-40, tickfont=dict(size=9), categoryorder="array",
                     categoryarray=data["label"].tolist())
    fig.update_layout(height=560, legend=TOP_LEGEND)
    return fig


NO_RESOLVED_PAIR = "no resolved pair"


def rank_fidelity_figure(trials: pd.DataFrame, curves: pd.DataFrame,
                         metric: str = "val_loss") -> Figure | None:
    """Kendall's tau between the ranking at each evaluation point and the final one
    (`shapesweep.results.stats.rank_fidelity`), against the fraction of the token budget."""
    fidelity = rank_fidelity(trials, curves, metric)
    if fidelity.empty:
        return None
    fig = Figure()
    for i, (sweep, group) in enumerate(fidelity.groupby("sweep")):
        stable = stable_fraction(group)
        # no resolved pair: no order to keep, so no tau (not a tau that never reaches 0.8)
        note = (NO_RESOLVED_PAIR if not group["resolved_pairs"].any()
                else f"≥ {FIDELITY_THRESHOLD:g} from {stable:.0%} of the budget" if stable is not None
                else f"never stays ≥ {FIDELITY_THRESHOLD:g}")
        fig.add_trace(Scatter(
            x=group["budget_fraction"], y=group["kendall_tau"], mode="lines+markers",
            name=f"{esc(sweep)} ({note})", line=dict(color=color("", i), width=2),
            customdata=np.stack([group["tokens"], group["n_candidates"]], axis=1).tolist(),
            hovertemplate="%{customdata[0]:.3s} tokens, %{customdata[1]} candidates<br>"
                          "tau %{y:.3f}<extra></extra>",
            meta={"sweep": sweep}))
    fig.add_hline(y=FIDELITY_THRESHOLD, line=dict(color="#8a6d00", dash="dash", width=1.5))
    if not fidelity["resolved_pairs"].any():
        fig.add_annotation(x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font=dict(size=13),
                           text=f"{NO_RESOLVED_PAIR}: every pair's final paired 95% interval includes zero, "
                           "so there is no order for a short trial to keep")
    fig = layout(fig, "Rank fidelity: does a short trial rank candidates as the full run does?",
                 "fraction of the token budget", "Kendall's tau vs the final ranking")
    fig.update_xaxes(tickformat=".0%")
    fig.update_yaxes(range=[min(-0.05, float(fidelity["kendall_tau"].min()) - 0.05), 1.05])
    return fig


def _axis_builders(lm: pd.DataFrame, lm_points) -> list[tuple[str, object]]:
    """The report's figures of loss against each axis the language models vary (`varied_axes`,
    the widest first): d_model / L is the U-curve, the FFN ratio the ratio figure where they
    apply; where no axis figure applies, the searched dimension's iso-budget figure."""
    means = lm_points()[0] if len(lm) else pd.DataFrame()
    axes = varied_axes(means) if len(means) else []
    special = {"width_depth_ratio": ("ucurve", lambda: ucurve_figure(lm)), "ffn_ratio": ("ratio", lambda: ratio_figure(lm))}
    builders = []
    for axis in axes:
        plain = (f"axis-lm-{axis}", functools.cache(lambda axis=axis: axis_figure(lm, axis, points=lm_points())))
        if axis in special:
            figure_id, build = special[axis]
            fig = build()
            builders.append((figure_id, lambda fig=fig: fig) if fig is not None else plain)
        else:
            builders.append(plain)
    drawn = functools.cache(lambda: any(build() is not None for _, build in builders))
    return builders + [("searched-lm", lambda: None if drawn() else searched_figure(lm, points=lm_points()))]


def applicable_figures(trials: pd.DataFrame, curves: pd.DataFrame, layers: pd.DataFrame | None = None,
                       compared: dict | None = None) -> list[tuple[str, Figure]]:
    """(id, figure) for every figure whose columns and families the data has (`layers`:
    `shapesweep.results.store.load_layers`, for xformer's representation figure;
    `compared`: `comparisons.compare_sweeps`, made once for the report's tables too)."""
    is_lm = trials["family"].isin(language_models())
    lm, vision = trials[is_lm], with_input_projection(trials[~is_lm])
    vision_metric = metric_for(vision) if len(vision) else "psnr"
    # Computed when first asked for, then shared by the figures of every cost axis.
    lm_points = functools.cache(lambda: pareto_points(lm))
    vision_points = functools.cache(lambda: pareto_points(vision, vision_metric))
    pareto = [(f"pareto-lm-{x}", lambda x=x: pareto_figure(lm, x, "val_loss", lm_points())) for x in LM_X_AXES]
    builders = pareto[:1] + _axis_builders(lm, lm_points) + [
        ("vs-baseline-lm", lambda: baseline_figure(lm, "val_loss", compared)),
        ("rank-fidelity-lm", lambda: rank_fidelity_figure(lm, curves, "val_loss")),
        ("scaling", lambda: scaling_figure(lm, lm_points())),
        *pareto[1:],
        ("widths", lambda: width_profile_figure(lm)),
        ("layers", lambda: layers_figure(lm, layers)),
        ("lens", lambda: lens_figure(lm, layers)),
        ("param-split", lambda: param_split_figure(lm, points=lm_points())),
        ("curves-lm", lambda: learning_curves_figure(lm, curves)),
    ]
    builders += [(f"pareto-vision-{x}", lambda x=x: pareto_figure(vision, x, vision_metric, vision_points()))
                 for x in ("params_incl_frozen", "training_flops", "wall_time_s")]
    builders += [("vs-baseline-vision", lambda: baseline_figure(vision, vision_metric, compared)),
                 ("rank-fidelity-vision", lambda: rank_fidelity_figure(vision, curves, vision_metric)),
                 ("curves-vision", lambda: learning_curves_figure(vision, curves))]
    figures = []
    for figure_id, build in builders:
        fig = build()
        if fig is not None:
            figures.append((figure_id, fig))
    return figures
