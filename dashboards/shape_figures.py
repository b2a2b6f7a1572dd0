"""Loss against the shape axes a sweep varies: the U-curve (d_model / L), the FFN ratio, k, L,
beta, alpha, and an iso-budget sweep's searched dimension; which of them a report draws, in
which order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd

from shapesweep.dashboards.figure_parts import (
    SERIES_FIELDS,
    Scatter,
    baseline_traces,
    best_per_bin,
    error_bars,
    other_tuned_trace,
    plain_value,
    series_name,
    spread_text,
    stopped_trace,
)
from shapesweep.dashboards.frames import (
    BASELINE,
    METRIC_LABELS,
    Figure,
    chosen_and_others,
    color,
    compared_families,
    esc,
    human,
    language_models,
    layout,
    point_data,
    ratio_families,
    seed_means,
)

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
        parts = [series, *(f"{f}={plain_value(v)}" for f, v in zip(split, values, strict=True) if v == v and v is not None)]
        fig.add_trace(Scatter(
            x=group[dim], y=group["mean"], mode="lines+markers" if numeric else "markers",
            name=series_name(parts, n_sweeps, sweep), marker=dict(color=c, size=8), line=dict(color=c),
            error_y=error_bars(group, c), text=spread_text(group), customdata=point_data(group),
            hovertemplate="%{customdata[1]}<br>%{y:.4g}%{text}<extra></extra>",
            meta={"rows": True, "sweep": sweep, "family": group["family"].iloc[0]}))
    log = numeric and means[dim].min() > 0 and means[dim].max() / means[dim].min() >= 8
    return layout(fig, title, (label or dim) + (" (log)" if log else ""), METRIC_LABELS[metric], log_x=log)


def _ratio_groups(frame: pd.DataFrame) -> pd.Series:
    """Hourglass d_h/d_model as a series key (hourglass-ffn Fig. 4); none when solved continuously."""
    ratio = frame["ffn_ratio"].round(2).where(frame["family"].isin(ratio_families()))
    return ratio if ratio.nunique() <= 6 else pd.Series(np.nan, index=frame.index)


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
    other_tuned_trace(fig, others, "width_depth_ratio")
    stopped_trace(fig, lm, "width_depth_ratio")
    groups = _ucurve_groups(means.sort_values("width_depth_ratio"))
    if not any(g["width_depth_ratio"].nunique() >= 2 for _, g in groups):
        return None  # points, no curve
    for i, (group_key, group) in enumerate(groups):
        sweep, family, k, ratio, shape = group_key
        by_ratio = family in ratio_families()
        parts = [family] + ([f"k={int(k)}"] if by_ratio else [])
        parts += [f"d_h/d={ratio:g}"] if by_ratio and ratio == ratio else []
        parts += [str(shape)] if isinstance(shape, str) else []
        name, c = series_name(parts, n_sweeps, sweep), color("", i)
        line, others = best_per_bin(group, "width_depth_ratio")
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
        baseline_traces(fig, trials, "width_depth_ratio", span, n_sweeps, means["sweep"].unique(), own_x=True)
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
    other_tuned_trace(fig, others, "ffn_ratio")
    means = means.assign(ratio=means["ffn_ratio"].round(3)).sort_values("ffn_ratio")
    for i, ((sweep, k), group) in enumerate(means.groupby(["sweep", "k"], sort=True)):
        name, c = series_name([f"k={int(k)}"], n_sweeps, sweep), color("", i)
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
    baseline_traces(fig, trials, "ffn_ratio", (means["ffn_ratio"].min(), means["ffn_ratio"].max()),
                     n_sweeps, means["sweep"].unique())
    return layout(fig, "Ratio sweep: validation loss vs d_h / d_model per k (best shape per ratio)",
                  "d_h / d_model", METRIC_LABELS["val_loss"])


def axis_builders(lm: pd.DataFrame, lm_points) -> list[tuple[str, Callable[[], Figure | None]]]:
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
