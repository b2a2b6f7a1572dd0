"""xformer Fig. 4: power laws of loss in training FLOPs, and the FLOPs one family needs
to reach another's loss ("reaches the baseline's loss with 78% of its FLOPs").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from shapesweep.dashboards.frames import (
    BASELINE,
    Figure,
    color,
    esc,
    human,
    language_models,
    layout,
    point_data,
    seed_means,
    trace_type,
)

Scatter = trace_type("scatter")


@dataclass(frozen=True)
class PowerLaw:
    """loss = a * flops ** -b, fitted as a line in log-log space."""

    a: float
    b: float
    r2: float
    flops_max: float  # the largest training FLOPs the fit saw

    def loss(self, flops):
        return self.a * np.asarray(flops, dtype=float) ** -self.b

    def flops_for(self, loss: float) -> float:
        return float((loss / self.a) ** (-1.0 / self.b))


def fit_power_law(flops, loss) -> PowerLaw | None:
    """A least-squares fit of log loss on log FLOPs; None without three points or a spread."""
    x, y = np.log(np.asarray(flops, float)), np.log(np.asarray(loss, float))
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3 or np.ptp(x) < np.log(1.2):
        return None
    fit = stats.linregress(x, y)
    if fit.slope >= 0:  # loss not falling with compute: no meaningful power law
        return None
    return PowerLaw(a=float(np.exp(fit.intercept)), b=float(-fit.slope), r2=float(fit.rvalue**2),
                    flops_max=float(np.exp(x.max())))


def fit_families(trials: pd.DataFrame, metric: str = "val_loss") -> dict[str, PowerLaw]:
    """One power law per series (family) over completed trials, seeds averaged."""
    return _fit_means(seed_means(trials, metric, extra=("training_flops",)))


def _fit_means(means: pd.DataFrame) -> dict[str, PowerLaw]:
    """`fit_families` of its seed means (`training_flops` among their columns)."""
    fits = {}
    for series, group in means.groupby("design"):
        fit = fit_power_law(group["training_flops"], group["mean"])
        if fit is not None:
            fits[str(series)] = fit
    return fits


def flops_to_match(fits: dict[str, PowerLaw], baseline: str = BASELINE) -> dict[str, tuple[float, float]]:
    """For each other series: (FLOPs it needs / FLOPs the baseline used, the loss matched).

    The reference loss is the baseline fit at its largest training run, as the xformer paper
    compares against its largest constant-width model.
    """
    if baseline not in fits:
        return {}
    reference = fits[baseline]
    target = float(reference.loss(reference.flops_max))
    return {name: (fit.flops_for(target) / reference.flops_max, target)
            for name, fit in fits.items() if name != baseline}


def match_sentences(fits: dict[str, PowerLaw], baseline: str = BASELINE) -> list[str]:
    return [f"{esc(name)} reaches the baseline's loss ({loss:.3f}) with {ratio:.0%} of its FLOPs"
            for name, (ratio, loss) in sorted(flops_to_match(fits, baseline).items())]


def scaling_figure(trials: pd.DataFrame,
                   points: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> Figure | None:
    """Loss vs training FLOPs with a fitted power law per family and the FLOPs-to-match text
    (`points`: `figures.pareto_points` of the language models, their FLOPs averaged over seeds)."""
    lm = trials[trials["family"].isin(language_models())]
    means = points[0] if points else seed_means(lm, "val_loss", extra=("training_flops",))
    fits = _fit_means(means)
    if not fits:
        return None
    fig = Figure()
    for i, (series, group) in enumerate(means.groupby("design")):
        c = color(series, i)
        fig.add_trace(Scatter(
            x=group["training_flops"], y=group["mean"], mode="markers", name=esc(series),
            marker=dict(color=c, size=6, opacity=0.5), legendgroup=esc(series),
            customdata=point_data(group),
            hovertemplate="%{customdata[1]}<br>%{x:.3s} FLOPs: %{y:.4g}<extra></extra>",
            meta={"rows": True}))
        fit = fits.get(series)
        if fit is not None:
            xs = np.geomspace(group["training_flops"].min(), group["training_flops"].max(), 40)
            fig.add_trace(Scatter(
                x=xs, y=fit.loss(xs), mode="lines", line=dict(color=c, width=2.5),
                name=f"{esc(series)} fit: {fit.a:.3g}·C^-{fit.b:.3f} (R²={fit.r2:.2f})",
                legendgroup=esc(series), hoverinfo="skip",
                meta={"family": group["family"].iloc[0]}))
    sentences = match_sentences(fits, BASELINE if BASELINE in fits else sorted(fits)[0])
    if sentences:
        fig.add_annotation(text="<br>".join(sentences), xref="paper", yref="paper", x=0.01, y=0.02,
                           xanchor="left", yanchor="bottom", showarrow=False, align="left",
                           bgcolor="rgba(255,255,255,0.85)", bordercolor="#999", font=dict(size=12))
    title = (f"Scaling: validation loss vs training FLOPs ({human(means['training_flops'].min())}–"
             f"{human(means['training_flops'].max())})")
    fig = layout(fig, title, "training FLOPs (log)", "validation loss (log)", log_x=True)
    fig.update_yaxes(type="log")
    return fig
