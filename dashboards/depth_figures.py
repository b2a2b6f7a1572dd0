"""Figures across depth: the ><former's width profiles, per-layer representation measures,
the logit lens, and where the parameters go.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from shapesweep.dashboards.figure_parts import (
    TOP_LEGEND,
    Bar,
    Scatter,
    series_name,
)
from shapesweep.dashboards.frames import (
    BASELINE,
    Figure,
    candidate_label,
    color,
    constant_width,
    esc,
    human,
    language_models,
    layout,
    point_data,
    seed_means,
    width_profiled,
)
from shapesweep.results.stats import (
    canonical_tuned_column,
)


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
        name = series_name([f"constant width {int(row['d_model'])} (this sweep's) · "
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
              panels: Sequence[tuple[str, str, float | None]], title: str) -> Figure:
    """One panel per (column, subplot title, threshold or None: any one of a layer's rows), one
    line per candidate against depth, constant width dashed."""
    n_rows = (len(panels) + 1) // 2
    fig = Figure.subplots(n_rows, 2, subplot_titles=[name for _, name, _ in panels], vertical_spacing=0.14)
    rows = trials.set_index("row_id")
    n_sweeps = means["sweep"].nunique()
    for i, (point, group) in enumerate(data.groupby("point", sort=False)):
        row = rows.loc[point]
        name = series_name([candidate_label(row)], n_sweeps, row["sweep"])
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
    panels: list[tuple[str, str, float | None]] = [
        ("matrix_entropy", "matrix entropy of the residual stream", None)]
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
    hover = point_data(best)
    fig = Figure()
    for column, name, c in (("params_attention", "attention", "#ff7f0e"), ("params_ffn", "FFN", "#1f77b4"),
                            ("params_norms", "norms", "#bcbd22")):
        fig.add_trace(Bar(x=labels, y=best[column], name=name, marker=dict(color=c), customdata=hover,
                          hovertemplate=f"{name} %{{y:.4s}}<br>%{{customdata[1]}}<extra></extra>",
                          meta={"rows": True}))
    fig = layout(fig, f"Parameter split of the {len(best)} best candidates (by validation loss)",
                  "", "non-embedding parameters")
    fig.update_layout(barmode="stack", height=540,
                      legend=TOP_LEGEND)
    fig.update_xaxes(tickangle=-40, tickfont=dict(size=9))
    return fig
