"""The analysis views Optuna and W&B users expect, per sweep: parallel coordinates over the
shape fields and the metric, the shape fields' importance for the metric, and slice plots.

A sweep is one search space, the set an importance is defined over, so each sweep gets its
own views. Points are candidates at their best tuned value, averaged over seeds
(`frames.seed_means`), as in every other figure. The importance is Optuna's fANOVA
(`optuna.importance.FanovaImportanceEvaluator`) over a study built in memory from those
candidates; fields the solver derives from each other (d_model, n_layers, their ratio) share
importance between them, as in any fANOVA of correlated inputs. A field missing for some
candidates (k of a conventional model beside hourglass ones) is a category, `–` where
missing. A view with too few candidates draws one line saying so, never an empty plot.
"""

from __future__ import annotations

import math

import optuna
import pandas as pd
from plotly.colors import sequential

from shapesweep.dashboards.figures import error_bars, metric_for
from shapesweep.dashboards.frames import (
    LOWER_IS_BETTER,
    METRIC_LABELS,
    Figure,
    color,
    esc,
    layout,
    point_data,
    seed_means,
    trace_type,
)
from shapesweep.results.schema import SHAPE_COLUMNS

Scatter = trace_type("scatter")
Bar = trace_type("bar")
Parcoords = trace_type("parcoords")

# plotly's "Viridis" spelt out, as plotly.py sends a named colour scale
VIRIDIS = [[i / (len(sequential.Viridis) - 1), c] for i, c in enumerate(sequential.Viridis)]
FIELDS = ("family", *(name for name, _ in SHAPE_COLUMNS if name != "widths"))
MISSING = "–"
MIN_CANDIDATES = 3  # fewer make no line, slice or ranking worth drawing
MIN_IMPORTANCE = 8  # fANOVA's forest needs a few points per varying field to say anything
SLICE_COLUMNS = 3
# A smaller forest than Optuna's default (64 trees, depth 64): the payload is rebuilt as trials
# land, and depth 6 (64 leaves) separates the few fields a sweep varies; 1000 candidates take ~1 s.
FANOVA = {"n_trees": 32, "max_depth": 6}
FANOVA_SAMPLE = 1000  # candidates the forest is fitted on at most (a fixed random draw): ~1 s a sweep


def varying_fields(means: pd.DataFrame) -> list[str]:
    """The shape fields whose value differs between the sweep's candidates."""
    return [f for f in FIELDS if f in means and means[f].astype(str).nunique() > 1]


def twins(means: pd.DataFrame, fields: list[str]) -> dict[str, list[str]]:
    """Each field that groups the candidates differently from every earlier one, with the later
    fields that only relabel it (n_kv_heads = n_heads; d_model and n_layers at one budget).
    The importance ranks the first of each: twins would split its share between them."""
    out: dict[str, list[str]] = {}
    codes = {f: pd.Series(pd.factorize(means[f].astype(str))[0]) for f in fields}
    for f in fields:
        first = next((g for g in out if _same_partition(codes[f], codes[g])), None)
        out.setdefault(first or f, []).extend([f] if first else [])
    return out


def _same_partition(a: pd.Series, b: pd.Series) -> bool:
    return a.nunique() == b.nunique() == len(pd.MultiIndex.from_arrays([a, b]).unique())


def categorical(values: pd.Series) -> bool:
    """Text, booleans and fields missing for some candidates are categories; numbers are not."""
    return not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values) \
        or bool(values.isna().any())


def _label(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return f"{int(value)}" if isinstance(value, float) and value.is_integer() else str(value)


def _categories(values: pd.Series) -> tuple[list[str], list[str]]:
    """(each candidate's label, the distinct labels: numbers in numeric order, then text)."""
    labels = [_label(v) for v in values]
    return labels, sorted(set(labels), key=_category_order)


def _category_order(text: str) -> tuple[int, float, str]:
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, math.inf, text)


def _param(values: pd.Series) -> tuple[optuna.distributions.BaseDistribution, list]:
    """One field as an Optuna parameter: its distribution and each candidate's value."""
    if categorical(values):
        labels, choices = _categories(values)
        return optuna.distributions.CategoricalDistribution(choices), labels
    numbers = values.astype(float)
    if (numbers == numbers.round()).all():
        ints = numbers.astype(int)
        return optuna.distributions.IntDistribution(int(ints.min()), int(ints.max())), ints.tolist()
    return optuna.distributions.FloatDistribution(float(numbers.min()), float(numbers.max())), numbers.tolist()


def importances(means: pd.DataFrame, fields: list[str], metric: str) -> pd.Series:
    """fANOVA importance of each field for `metric` (sums to 1), largest first, over at most
    `FANOVA_SAMPLE` of the candidates."""
    if len(means) > FANOVA_SAMPLE:
        means = means.sample(FANOVA_SAMPLE, random_state=0)
    distributions, params = {}, {}
    for f in fields:
        distributions[f], params[f] = _param(means[f])
    trials = [optuna.trial.create_trial(params={f: params[f][i] for f in fields}, distributions=distributions,
                                        value=float(value))
              for i, value in enumerate(means["mean"])]
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # "a new study created in memory" is noise here
    study = optuna.create_study(direction="minimize" if LOWER_IS_BETTER[metric] else "maximize")
    study.add_trials(trials)
    scores = optuna.importance.get_param_importances(
        study, evaluator=optuna.importance.FanovaImportanceEvaluator(**FANOVA, seed=0), params=fields)
    return pd.Series(scores, dtype=float)


def note_figure(title: str, line: str) -> Figure:
    """One line instead of an empty plot: why this view has nothing to draw."""
    fig = Figure()
    fig.add_trace(Scatter(x=[0], y=[0], mode="text", text=[esc(line)], textfont=dict(size=13),
                          hoverinfo="skip", showlegend=False))
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=14)), height=160,
                      margin=dict(l=20, r=20, t=45, b=10))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def parallel_figure(means: pd.DataFrame, fields: list[str], metric: str, title: str) -> Figure:
    """One line per candidate through every varying field and the metric, coloured by the metric."""
    dimensions = []
    for f in fields:
        if categorical(means[f]):
            labels, choices = _categories(means[f])
            codes = [choices.index(label) for label in labels]
            dimensions.append(dict(label=f, values=codes, tickvals=list(range(len(choices))),
                                   ticktext=[esc(c) for c in choices]))
        else:
            dimensions.append(dict(label=f, values=means[f].astype(float).tolist()))
    label = METRIC_LABELS[metric]
    dimensions.append(dict(label=label, values=means["mean"].tolist()))
    fig = Figure()
    fig.add_trace(Parcoords(
        dimensions=dimensions, labelangle=-20, labelside="top",
        line=dict(color=means["mean"].tolist(), colorscale=VIRIDIS, showscale=True,
                  reversescale=LOWER_IS_BETTER[metric], colorbar=dict(title=dict(text=label, side="right"))),
        meta={"sweep": means["sweep"].iloc[0]}))
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=14)), height=470,
                      margin=dict(l=70, r=60, t=110, b=30))
    return fig


def importance_figure(scores: pd.Series, metric: str, title: str) -> Figure:
    """Horizontal bars, the most important field on top."""
    scores = scores.sort_values()
    fig = Figure()
    fig.add_trace(Bar(x=scores.to_numpy(), y=list(scores.index), orientation="h", marker=dict(color="#1f77b4"),
                      hovertemplate="%{y}: %{x:.1%} of the explained variance<extra></extra>"))
    fig = layout(fig, title, f"fANOVA importance for {METRIC_LABELS[metric]} (share, sums to 1)", "shape field")
    fig.update_xaxes(tickformat=".0%", rangemode="tozero")
    fig.update_layout(height=max(260, 120 + 32 * len(scores)))
    return fig


def slice_figure(means: pd.DataFrame, fields: list[str], metric: str, title: str) -> Figure:
    """The metric against each varying field, one panel per field; error bars: std over seeds."""
    rows = math.ceil(len(fields) / SLICE_COLUMNS)
    fig = Figure.subplots(rows, SLICE_COLUMNS, shared_yaxes=True, horizontal_spacing=0.04,
                          vertical_spacing=0.3 / rows)
    colors = [color(d, i) for i, d in enumerate(means["design"])]
    for panel, f in enumerate(fields):
        row, col = panel // SLICE_COLUMNS + 1, panel % SLICE_COLUMNS + 1
        x = _categories(means[f])[0] if categorical(means[f]) else means[f].astype(float)
        fig.add_trace(Scatter(
            x=x, y=means["mean"], mode="markers", showlegend=False,
            marker=dict(color=colors, size=7, opacity=0.7), error_y=error_bars(means),
            customdata=point_data(means), hovertemplate=f"{f} %{{x}}<br>%{{customdata[1]}}<br>%{{y:.4g}}<extra></extra>",
            meta={"rows": True}), row=row, col=col)
    fig = layout(fig, title, "", "")
    for panel, f in enumerate(fields):
        row, col = panel // SLICE_COLUMNS + 1, panel % SLICE_COLUMNS + 1
        fig.update_xaxes(title=dict(text=f), row=row, col=col, **({"type": "category"} if categorical(means[f]) else {}))
        fig.update_yaxes(title=dict(text=METRIC_LABELS[metric] if col == 1 else ""), row=row, col=col)
    fig.update_layout(height=150 + 300 * rows)
    return fig


def sweep_views(index: int, trials: pd.DataFrame) -> list[tuple[str, Figure]]:
    """The three views of one sweep's trials (ids `views-<kind>-<index>`)."""
    sweep, metric = trials["sweep"].iloc[0], metric_for(trials)
    means = seed_means(trials, metric)
    fields = varying_fields(means)
    where = f"{esc(sweep)}: {len(means)} candidates (mean over seeds)"
    titles = {"parallel": f"Parallel coordinates · {where}",
              "importance": f"Shape-field importance (fANOVA) · {where}"
                            + (f", a random {FANOVA_SAMPLE:,} of them" if len(means) > FANOVA_SAMPLE else ""),
              "slices": f"Slices: {METRIC_LABELS[metric]} vs each shape field · {where}"}
    few = None
    if len(means) < MIN_CANDIDATES:
        few = f"{len(means)} candidates with a result: the views need at least {MIN_CANDIDATES}"
    elif not fields:
        few = "no shape field varies between the candidates"
    if few:
        return [(f"views-{kind}-{index}", note_figure(title, few)) for kind, title in titles.items()]
    groups = twins(means, fields)
    if len(means) >= MIN_IMPORTANCE and len(groups) >= 2:
        scores = importances(means, list(groups), metric)
        fields = [g for f in scores.index for g in (f, *groups[f])]  # the slices follow the ranking
        scores.index = [" ≡ ".join((f, *groups[f])) for f in scores.index]
        importance = importance_figure(scores, metric, titles["importance"])
    else:
        why = f"{len(means)} candidates: fANOVA needs at least {MIN_IMPORTANCE}" if len(groups) >= 2 \
            else f"only {' ≡ '.join(fields)} varies: there is nothing to rank"
        importance = note_figure(titles["importance"], why)
    return [(f"views-parallel-{index}", parallel_figure(means, fields, metric, titles["parallel"])),
            (f"views-importance-{index}", importance),
            (f"views-slices-{index}", slice_figure(means, fields, metric, titles["slices"]))]


def analysis_views(trials: pd.DataFrame) -> list[tuple[str, Figure]]:
    """Every sweep's analysis views, for the report's figure list (`frames.with_derived` trials)."""
    out = []
    for index, (_, group) in enumerate(trials.groupby("sweep", sort=True)):
        out += sweep_views(index, group)
    return out
