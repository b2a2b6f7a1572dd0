"""What the report's figures share: trace types, cost axes, Pareto points, error bars, the
grey traces of unchosen values, stopped trials and baselines.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from shapesweep.dashboards.frames import (
    BASELINE,
    OTHER_TUNED_COLOR,
    Figure,
    chosen_and_others,
    color,
    esc,
    human,
    language_models,
    point_data,
    present,
    seed_means,
    trace_type,
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


def scatter_class(n_points: int):
    return Scattergl if n_points > MANY_POINTS else Scatter


def series_name(parts: list, sweeps: int, sweep: str) -> str:
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


def spread_text(frame: pd.DataFrame) -> list[str]:
    """Hover text after the mean: ± the std over seeds, or that there was one seed."""
    return [f" ± {std:.2g} (n={int(n)})" if n > 1 else " (1 seed)"
            for std, n in zip(frame["std"], frame["n"], strict=True)]


SERIES_FIELDS = ("k", "shape", "activation", "n_experts")  # discrete shape fields: a series each


def plain_value(value) -> str:
    """A shape field's value as a legend writes it: 2, not 2.0."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def with_input_projection(trials: pd.DataFrame) -> pd.DataFrame:
    """`params_incl_frozen`: the trainable parameters plus a fixed W_in (hourglass-mlp's count)."""
    return trials.assign(params_incl_frozen=trials["params_total"] + trials["params_frozen"].fillna(0))


def _trainable(frame: pd.DataFrame) -> list[str]:
    return [f"{human(counted)} parameters incl. W_in, {human(trainable)} trainable"
            for counted, trainable in zip(frame["params_incl_frozen"], frame["params_total"], strict=True)]


def hover_extra(frame: pd.DataFrame, counted: bool) -> list[str]:
    """Hover text after the mean: its spread, and (hourglass-mlp) the parameters with W_in."""
    spread = spread_text(frame)
    return [s + f"<br>{p}" for s, p in zip(spread, _trainable(frame), strict=True)] if counted else spread


def error_bars(frame: pd.DataFrame, c: str | None = None) -> dict:
    """Error bars of seed-mean points: the std over seeds (none drawn when every n is 1)."""
    return dict(type="data", array=frame["std"].tolist(), visible=bool(len(frame) and frame["n"].max() > 1),
                thickness=1, **({"color": c} if c else {}))


def other_tuned_trace(fig: Figure, others: pd.DataFrame, x: str) -> None:
    """The tuned values candidates did not choose (`chosen_and_others`), greyed behind the chosen points."""
    others = others[others[x].notna()] if x in others else others.iloc[0:0]
    if others.empty:
        return
    fig.add_trace(Scatter(
        x=others[x], y=others["mean"], mode="markers", name="other tuned values (not chosen)",
        marker=dict(color=OTHER_TUNED_COLOR, size=6, symbol="circle-open"),
        error_y=error_bars(others, OTHER_TUNED_COLOR), customdata=point_data(others), text=spread_text(others),
        hovertemplate="not chosen: %{customdata[1]}<br>%{y:.4g}%{text}<extra></extra>",
        meta={"rows": True, "other_tuned": True}))


def stopped_trace(fig: Figure, trials: pd.DataFrame, x: str, metric: str = "val_loss") -> None:
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


def baseline_traces(fig: Figure, trials: pd.DataFrame, x: str, x_span: tuple[float, float],
                     n_sweeps: int, sweeps, own_x: bool = False) -> None:
    """The conventional baseline of `sweeps` dashed: along x when it varies; else a horizontal
    line over `x_span`, or (`own_x`) its points at their own x."""
    base = seed_means(trials[(trials["family"] == BASELINE) & trials["sweep"].isin(sweeps)], "val_loss")
    for j, (sweep, group) in enumerate(base.groupby("sweep")):
        group = best_per_bin(group, x)[0]
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
            name=series_name([label], n_sweeps, sweep),
            error_y=error_bars(group) if points else None,
            customdata=point_data(group) if points else None,
            hovertemplate="%{customdata[1]}<br>%{y:.4g}<extra></extra>" if points else "baseline %{y:.4g}<extra></extra>",
            meta={"sweep": sweep, "family": BASELINE}))


def best_per_bin(group: pd.DataFrame, x: str, bins: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(line, rest): every point when x takes few values; else the best point per log-x bin,
    so a random search's cloud still reads as a curve (the rest is drawn faint)."""
    if group[x].nunique() <= 12:
        return group.sort_values(x), group.iloc[0:0]
    which = pd.cut(np.log(group[x].astype(float)), bins, labels=False)
    line = group.loc[group.groupby(which)["mean"].idxmin()].sort_values(x)
    return line, group.drop(line.index)


# A legend of a few entries in one row above the plot, at its right (clear of the title): its
# y is the plot area's (`paper`), not the figure's, whose top it would be drawn beyond.
TOP_LEGEND = dict(orientation="h", yref="paper", y=1.02, yanchor="bottom", xanchor="right", x=1)
