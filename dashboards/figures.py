"""Plotly figures, each a pure function of results DataFrames (None when it does not apply).

Inputs are `frames.with_derived(load_trials(...))` and `load_curves(...)`. Points are
candidates at their best tuned value, the mean over seeds with the std as error bars
(`shapesweep.results.stats`); the tuned values a candidate did not choose are drawn grey. Every trace
carries `meta` the report's filters read: `{"sweep", "family"}` for trace-level toggling,
and `{"rows": true}` when `customdata[i][0]` is the row id of point i (filtered per point).

Here: the Pareto, learning-curve, vs-baseline and rank-fidelity figures and the report's
figure list (`applicable_figures`); the shape axes' figures are `shape_figures`, the
depth-wise ones `depth_figures`, what they share `figure_parts` (named here for callers).
"""


from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd

from shapesweep.common import UserError
from shapesweep.dashboards.depth_figures import (
    layers_figure,
    lens_figure,
    param_split_figure,
    width_profile_figure,
)
from shapesweep.dashboards.figure_parts import (
    LM_X_AXES,
    TOP_LEGEND,
    X_AXES,
    Scatter,
    error_bars,
    hover_extra,
    metric_for,
    other_tuned_trace,
    pareto_front,
    pareto_points,
    scatter_class,
    series_name,
    stopped_trace,
    with_input_projection,
)
from shapesweep.dashboards.frames import (
    LOWER_IS_BETTER,
    METRIC_LABELS,
    NO_INTERVAL,
    VERDICT_COLORS,
    Figure,
    candidate_label,
    color,
    esc,
    language_models,
    layout,
    point_data,
    present,
)
from shapesweep.dashboards.scaling import scaling_figure
from shapesweep.dashboards.shape_figures import (
    PARAM_AXES,
    axis_builders,
    axis_figure,
    iso_budget,
    ratio_figure,
    searched_figure,
    ucurve_figure,
    varied_axes,
)
from shapesweep.families.base import tuned_text
from shapesweep.results.stats import (
    FIDELITY_THRESHOLD,
    compare,
    rank_fidelity,
    stable_fraction,
)


def pareto_figure(trials: pd.DataFrame, x: str = "params_non_embedding", metric: str = "val_loss",
                  points: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> Figure | None:
    """hourglass-mlp's frontier: metric vs a cost, one frontier per family, mean ± std over seeds
    (`points`: `pareto_points(trials, metric)`, when several figures share them)."""
    means, others = points or pareto_points(trials, metric)
    means = means[means[x].notna() & (means[x] > 0)] if x in means else means.iloc[0:0]
    if len(means) < 2 or (x in PARAM_AXES and iso_budget(means)):
        return None  # one point is no frontier; at one budget the x-range is rounding noise
    fig, n_sweeps, lower = Figure(), means["sweep"].nunique(), LOWER_IS_BETTER[metric]
    other_tuned_trace(fig, others[others[x].notna() & (others[x] > 0)] if x in others else others, x)
    stopped_trace(fig, trials, x, metric)
    trace = scatter_class(len(means))
    sweeps_per_design = means.groupby("design")["sweep"].nunique()
    counted = x == "params_incl_frozen"  # say what the trainable part is, beside the counted one
    for i, ((sweep, series), group) in enumerate(means.groupby(["sweep", "design"], sort=True)):
        name = series_name([series], n_sweeps, sweep)
        # A design's own colour, unless it is in several sweeps: then each gets one of its own.
        c = color(series if sweeps_per_design[series] == 1 else "", i)
        fig.add_trace(trace(
            x=group[x], y=group["mean"], mode="markers", name=name, legendgroup=name, showlegend=False,
            marker=dict(color=c, size=7, opacity=0.55),
            error_y=error_bars(group, c), text=hover_extra(group, counted),
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
    trace = scatter_class(len(data))
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
        several = values is not None and values[tuple(which)] > 1
        group_name = "/".join(map(str, which))  # the candidate's (or design's) own: labels may repeat
        name = " ".join([tuned, *what]) if several else series_name([p for p in (head, tuned, *what) if p],
                                                                      n_sweeps, sweep)
        titled = dict(legendgrouptitle=dict(text=series_name([head], n_sweeps, sweep))) if several else {}
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
    labels = [series_name([candidate_label(row)], n_sweeps, row["sweep"]) for row in frame.to_dict("records")]
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
    builders: list[tuple[str, Callable[[], Figure | None]]] = pareto[:1] + axis_builders(lm, lm_points) + [
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
    def vision_pareto(x: str) -> Callable[[], Figure | None]:
        return lambda: pareto_figure(vision, x, vision_metric, vision_points())

    builders += [(f"pareto-vision-{x}", vision_pareto(x))
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


__all__ = [
    "CANDIDATE_COLORS",
    "END_MARKS",
    "LM_X_AXES",
    "MAX_CANDIDATE_CURVES",
    "NO_RESOLVED_PAIR",
    "STATUS_STYLES",
    "X_AXES",
    "applicable_figures",
    "axis_figure",
    "baseline_figure",
    "error_bars",
    "iso_budget",
    "layers_figure",
    "learning_curves_figure",
    "lens_figure",
    "metric_for",
    "param_split_figure",
    "pareto_figure",
    "pareto_front",
    "pareto_points",
    "rank_fidelity_figure",
    "ratio_figure",
    "searched_figure",
    "ucurve_figure",
    "varied_axes",
    "width_profile_figure",
    "with_input_projection",
]
