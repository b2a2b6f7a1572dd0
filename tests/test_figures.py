"""Dashboard figures and the report payload, on sweeps written through the real results store."""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots
from synthetic import write_demo_like

from shapesweep.common import UserError
from shapesweep.dashboards.figures import (
    applicable_figures,
    baseline_figure,
    layers_figure,
    learning_curves_figure,
    lens_figure,
    pareto_figure,
    pareto_front,
    rank_fidelity_figure,
    searched_figure,
    ucurve_figure,
    width_profile_figure,
)
from shapesweep.dashboards.frames import (
    NO_INTERVAL,
    VERDICT_COLORS,
    Figure,
    esc,
    hover_text,
    with_derived,
)
from shapesweep.dashboards.report import budget_labels, build_payload, script_safe, write_report
from shapesweep.dashboards.scaling import fit_power_law, flops_to_match, match_sentences
from shapesweep.dashboards.views import analysis_views
from shapesweep.results.stats import FIDELITY_THRESHOLD, compare, rank_fidelity
from shapesweep.results.store import load_curves, load_layers, load_trials, write_trial

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def store(synthetic_store) -> str:
    return synthetic_store


@pytest.fixture(scope="module")
def frames(store):
    return with_derived(load_trials(store)), load_curves(store)


def test_pareto_front_keeps_only_undominated_points():
    x = np.array([1, 2, 3, 4, 5, 2], float)
    y = np.array([5, 4, 4.5, 3, 3.5, 6], float)
    assert pareto_front(x, y).tolist() == [0, 1, 3]
    assert pareto_front(x, -y, lower_is_better=False).tolist() == [0, 1, 3]


def test_power_law_fit_and_flops_to_match_recover_78_percent():
    flops = np.geomspace(1e18, 1e20, 6)
    baseline = 21.0 * flops**-0.05
    better = 21.0 * (flops / 0.78) ** -0.05  # needs 78% of the FLOPs for any loss
    fits = {"conventional": fit_power_law(flops, baseline), "variable_width": fit_power_law(flops, better)}
    assert fits["conventional"].b == pytest.approx(0.05, rel=1e-9)
    ratio, loss = flops_to_match(fits)["variable_width"]
    assert ratio == pytest.approx(0.78, rel=1e-6)
    assert loss == pytest.approx(21.0 * 1e20**-0.05)
    assert match_sentences(fits) == [
        f"variable_width reaches the baseline's loss ({loss:.3f}) with 78% of its FLOPs"]
    assert fit_power_law([1e18, 1e18, 1e18], [3, 3, 3]) is None  # no spread, no fit


def test_every_applicable_figure_is_built_from_the_store(frames):
    trials, curves = frames
    ids = [figure_id for figure_id, _ in applicable_figures(trials, curves)]
    for expected in ("pareto-lm-params_non_embedding", "pareto-lm-params_total", "pareto-lm-training_flops",
                     "pareto-lm-kv_cache_per_token", "pareto-lm-wall_time_s", "ucurve", "ratio",
                     "scaling", "widths", "param-split", "curves-lm", "pareto-vision-params_incl_frozen",
                     "curves-vision"):
        assert expected in ids


def test_figures_only_where_their_families_apply(frames):
    trials, curves = frames
    conventional = trials[(trials["sweep"] == "ucurve") & (trials["family"] == "conventional")]
    ids = [figure_id for figure_id, _ in applicable_figures(conventional, curves)]
    assert "ratio" not in ids and "widths" not in ids and "pareto-vision-params_incl_frozen" not in ids
    assert "ucurve" in ids  # a conventional-only width/depth sweep still has its U-curve
    vision = trials[trials["family"] == "vision_mlp"]
    ids = [figure_id for figure_id, _ in applicable_figures(vision, curves)]
    # two of its four candidates had a seed stopped (no result): too few to rank
    assert ids == ["pareto-vision-params_incl_frozen", "pareto-vision-training_flops",
                   "pareto-vision-wall_time_s", "curves-vision"]


def _tuned_results(trials: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """By hand: each (key, tuned value) none of whose seeds ASHA stopped, its mean and std
    (ddof=1) over completed seeds, and each key's best of them (its result)."""
    stopped = (trials["status"] == "stopped_early").groupby([trials["key"], trials["tuned_json"]]).any()
    done = trials[trials["status"] == "completed"]
    by_tuned = done.groupby(["key", "tuned_json"])["val_loss"]
    means, stds = by_tuned.mean(), by_tuned.std(ddof=1).fillna(0.0)
    kept = ~stopped.reindex(means.index).to_numpy()
    means, stds = means[kept], stds[kept]
    return means, stds, means.groupby(level="key").idxmin()


def test_pareto_points_are_seed_means_at_the_best_tuned_value_with_spread(frames):
    """A point is a candidate at its best tuned value: mean ± std (ddof=1) over its seeds;
    the tuned values it did not choose are one grey trace."""
    trials, _ = frames
    lm = trials[trials["sweep"] == "ucurve"]
    fig = pareto_figure(lm, "params_non_embedding", "val_loss")
    means, stds, best = _tuned_results(lm)
    checked, greyed = 0, 0
    stopped = [t for t in fig.data if t["meta"].get("stopped")]  # ASHA-stopped trials stay visible
    assert len(stopped[0]["x"]) == ((lm["status"] == "stopped_early") & lm["val_loss"].notna()).sum()
    assert all(text.startswith("stopped by ASHA at ") for text in stopped[0]["text"])
    for trace in (t for t in fig.data if t["meta"].get("rows") and not t["meta"].get("stopped")):
        for y, err, (row_id, hover) in zip(trace["y"], trace["error_y"]["array"], trace["customdata"],
                                           strict=True):
            row = trials.loc[row_id]
            tuned = (row["key"], row["tuned_json"])
            chosen = best[row["key"]] == tuned
            assert chosen != bool(trace["meta"].get("other_tuned"))
            assert y == pytest.approx(means[tuned]) and err == pytest.approx(stds[tuned])
            assert "d_model=" in hover and "n_layers=" in hover and "tuned lr=" in hover
            checked += chosen
            greyed += not chosen
    assert checked == len(best)
    assert greyed == len(means) - len(best) > 0
    for trace in fig.data:
        if not trace["meta"].get("rows"):  # frontier: falling loss as parameters grow
            assert all(np.diff(np.asarray(trace["y"], float)) < 0)


def test_variable_width_shapes_are_separate_series_with_their_own_colours(frames):
    """xformer compares width schedules within one family: each shape is its own frontier."""
    trials, _ = frames
    vw = trials[(trials["family"] == "variable_width") & (trials["status"] == "completed")]
    shapes = sorted(vw["shape"].unique())
    assert len(shapes) >= 3
    fig = pareto_figure(vw, "params_non_embedding", "val_loss")
    fronts = [t for t in fig.data if not t["meta"].get("rows")]
    names = sorted({t["name"].split(" · ")[0] for t in fronts})
    assert names == [f"variable_width ({shape})" for shape in shapes]
    per_sweep = {}
    for t in fronts:
        per_sweep.setdefault(t["meta"]["sweep"], []).append(t["line"]["color"])
    assert max(len(colours) for colours in per_sweep.values()) >= 3
    assert all(len(set(colours)) == len(colours) for colours in per_sweep.values())
    for trace in (t for t in fig.data if t["meta"].get("rows") and not t["meta"].get("other_tuned")):
        rows = trials.loc[[row_id for row_id, _ in trace["customdata"]]]
        assert rows["shape"].nunique() == 1


def test_ucurve_marks_the_best_region_and_draws_the_baseline_dashed(frames):
    trials, _ = frames
    lm = trials[trials["sweep"] == "ucurve"]
    fig = ucurve_figure(lm)
    assert fig.layout["xaxis"]["type"] == "log"
    best = min((min(t["y"]), t["x"][int(np.argmin(t["y"]))]) for t in fig.data
               if t["meta"].get("rows") and not t["meta"].get("stopped"))
    # the best candidate (by hand) is the curve's lowest point
    means, _, chosen = _tuned_results(lm[lm["family"].isin(("hourglass", "variable_width"))])
    ratios = lm.groupby("key")["width_depth_ratio"].first()
    assert best[1] == ratios[means.loc[list(chosen)].idxmin()[0]]
    # a best region that reaches the sampled ratios' edge: no band, a note that says so
    fig = ucurve_figure(lm, tolerance=1.0)
    assert not fig.layout.get("shapes")
    assert any("edge of the sampled ratios" in a["text"] for a in fig.layout["annotations"])
    inner = lm[lm["width_depth_ratio"] < 200]  # its best is inside: a band around it
    fig = ucurve_figure(inner, tolerance=1e-4)
    curves = [t for t in fig.data if t["meta"].get("rows") and not t["meta"].get("other_tuned")
              and not t["meta"].get("stopped")]
    best = min((min(t["y"]), t["x"][int(np.argmin(t["y"]))]) for t in curves)
    (region,) = fig.layout["shapes"]
    assert region["x0"] <= best[1] <= region["x1"]
    assert inner["width_depth_ratio"].min() < region["x0"] and region["x1"] < inner["width_depth_ratio"].max()
    assert any("best region of the curves" in a["text"] for a in fig.layout["annotations"])
    (baseline,) = [t for t in fig.data if t["meta"].get("family") == "conventional"]
    assert baseline["line"]["dash"] == "dash"
    # a baseline of one shape is its point at its own ratio, not a line over every ratio
    base = inner[(inner["family"] == "conventional") & (inner["status"] == "completed")]
    assert set(baseline["x"]) <= set(base["width_depth_ratio"])


def test_vs_baseline_figure_draws_each_paired_interval_coloured_by_verdict(frames):
    trials, _ = frames
    ucurve = trials[trials["sweep"] == "ucurve"]
    expected = compare(ucurve).set_index("key")
    assert (expected["variant"] == "baseline").sum() == 1  # the synthetic grid names one
    fig = baseline_figure(ucurve)
    drawn = 0
    for trace in fig.data:
        verdict = trace["meta"]["verdict"]
        assert trace["marker"]["color"] == VERDICT_COLORS[verdict]
        bars = trace["error_y"]
        for y, plus, minus, (row_id, _) in zip(trace["y"], bars["array"], bars["arrayminus"], trace["customdata"],
                                               strict=True):
            row = expected.loc[trials.loc[row_id, "key"]]
            assert (row["verdict"] or NO_INTERVAL) == verdict and y == pytest.approx(row["delta_vs_baseline"])
            has_ci = row["ci_low"] is not None  # the bars: the family-adjusted interval
            assert plus == pytest.approx(row["ci_high_adjusted"] - y if has_ci else 0.0)
            assert minus == pytest.approx(y - row["ci_low_adjusted"] if has_ci else 0.0)
            assert not has_ci or row["ci_high_adjusted"] - row["ci_low_adjusted"] > row["ci_high"] - row["ci_low"]
            drawn += 1
    assert drawn == expected["delta_vs_baseline"].notna().sum() - 1  # each with a result, but the baseline
    assert {"better", "worse", "within noise"} <= {t["meta"]["verdict"] for t in fig.data}
    unresolved = expected[expected["verdict"] == "within noise"]  # the hover says what would resolve it
    texts = [text for t in fig.data for text in t["text"]]
    assert any(f"{n} would resolve it (80% power)" in text for n in unresolved["seeds_for_80pct_power"]
               for text in texts)
    assert any(shape["y0"] == 0 and shape["y1"] == 0 for shape in fig.layout["shapes"])  # the zero line
    assert baseline_figure(trials[trials["sweep"] == "mlp"]) is None  # no baseline variant there


def test_rank_fidelity_figure_plots_kendalls_tau_with_the_threshold(frames):
    trials, curves = frames
    lm = trials[trials["family"] != "vision_mlp"]
    expected = rank_fidelity(lm, curves)
    fig = rank_fidelity_figure(lm, curves)
    assert {t["meta"]["sweep"] for t in fig.data} == set(expected["sweep"])
    for trace in fig.data:
        rows = expected[expected["sweep"] == trace["meta"]["sweep"]]
        assert list(trace["x"]) == pytest.approx(rows["budget_fraction"].tolist())
        assert list(trace["y"]) == pytest.approx(rows["kendall_tau"].tolist())
    assert any(shape["y0"] == FIDELITY_THRESHOLD for shape in fig.layout["shapes"])


def test_learning_curves_mark_asha_stopped_trials(frames):
    trials, curves = frames
    lm = trials[trials["family"] != "vision_mlp"]
    fig = learning_curves_figure(lm, curves)
    stopped_ends = sum(len(t["x"]) for t in fig.data if t["mode"] == "markers" and t["marker"]["symbol"] == "x")
    assert stopped_ends == int((lm["status"] == "stopped_early").sum())
    assert any(t["line"]["dash"] == "dash" for t in fig.data if t["mode"] == "lines")


def test_width_profiles_show_avg_width_and_flops(frames):
    trials, _ = frames
    fig = width_profile_figure(trials)
    profiles = [t for t in fig.data if t["meta"].get("rows") and t["line"].get("dash") != "dash"]
    assert profiles
    for trace in profiles:
        row = trials.loc[trace["customdata"][0][0]]
        assert list(trace["y"]) == [int(w) for w in row["widths"]]
        assert f"avg width {row['avg_layer_width']:.0f}" in trace["name"] and "FLOPs/tok" in trace["name"]
        assert row["shape"] != "constant"
    # dashed: the sweep's own constant-width model (here its conventional one), without β/α
    (baseline,) = [t for t in fig.data if t["line"].get("dash") == "dash"]
    row = trials.loc[baseline["customdata"][0][0]]
    assert row["sweep"] == "shapes" and row["family"] == "conventional" and "β" not in baseline["name"]
    assert list(baseline["y"]) == [row["d_model"]] * 2 and "this sweep's" in baseline["name"]


def _analysed_store(root) -> str:
    """A sweep of constant-width and ><former trials, each with xformer §4 layer rows."""
    from synthetic import synthetic_sweep

    for row, curve in synthetic_sweep("fig7", 24, families=("conventional", "variable_width"),
                                      budgets=(30e6,), seeds=2):
        # without ASHA every trial ends (a stopped seed would leave its candidate no result)
        row["status"] = "completed" if row["status"] == "stopped_early" else row["status"]
        layers = [{"layer": layer, "width": row["d_model"], "threshold": t,
                   "matrix_entropy": 0.3 + 0.1 * layer / row["n_layers"] + 0.01 * row["seed"],
                   "activation_density": (1 - 0.1 * row["seed"]) / (1 + t),
                   "lens_logprob": -5.0 + 4.0 * layer / row["n_layers"] - 0.1 * row["seed"],
                   "lens_entropy": 5.0 - 3.0 * layer / row["n_layers"],
                   "lens_kl": 0.5 / layer}
                  for layer in range(1, row["n_layers"] + 1) for t in (0.01, 0.1, 1.0)]
        write_trial(root, "fig7", row, curve, layers if row["status"] != "failed" else [])
    return str(root)


def test_layers_figure_draws_seed_means_by_depth(tmp_path, frames):
    root = _analysed_store(tmp_path)
    trials, layers = with_derived(load_trials(root)), load_layers(root)
    fig = layers_figure(trials, layers)
    titles = [a["text"] for a in fig.layout["annotations"]]
    assert titles == ["matrix entropy of the residual stream", "MLP activation density, |a| > 0.01",
                      "MLP activation density, |a| > 0.1", "MLP activation density, |a| > 1"]
    done = trials[trials["status"] == "completed"]
    for trace in fig.data:
        row = trials.loc[trace["customdata"][0][0]]
        # the seeds of the candidate's chosen tuned value (its point's row is one of them)
        seeds = done[(done["key"] == row["key"]) & (done["tuned_json"] == row["tuned_json"])]["seed"]
        assert trace["x"][-1] == 1.0 and len(trace["x"]) == row["n_layers"]  # depth = layer / n_layers
        if trace["xaxis"] == "x":  # the entropy panel: the mean over those seeds
            assert trace["y"][0] == pytest.approx(0.3 + 0.1 / row["n_layers"] + 0.01 * seeds.mean())
        assert trace["line"]["dash"] == ("solid" if row["family"] == "variable_width" else "dash")
    legend = [t for t in fig.data if t.get("showlegend") is not False]
    assert len(fig.data) == 4 * len(legend) and {t["line"]["dash"] for t in legend} == {"solid", "dash"}
    ids = [figure_id for figure_id, _ in applicable_figures(trials, load_curves(root), layers)]
    assert "layers" in ids
    assert '"id": "layers"' in build_payload(root)
    # a sweep without layer rows has no such figure
    plain, curves = frames
    assert "layers" not in [figure_id for figure_id, _ in applicable_figures(plain, curves)]
    assert layers_figure(plain, layers.iloc[0:0]) is None


def test_lens_figure_draws_xformer_figure_8_beside_figure_7(tmp_path, frames):
    """The logit lens's three measures against depth, one line per candidate (its seeds'
    mean), constant width dashed; a store without lens columns (older trials) has none."""
    root = _analysed_store(tmp_path)
    trials, layers = with_derived(load_trials(root)), load_layers(root)
    fig = lens_figure(trials, layers)
    assert [a["text"] for a in fig.layout["annotations"]] == [
        "log probability of the target token (nats)", "entropy of the decoded distribution (nats)",
        "symmetrized KL to the layer before (nats)"]
    done = trials[trials["status"] == "completed"]
    for trace in fig.data:
        row = trials.loc[trace["customdata"][0][0]]
        seeds = done[(done["key"] == row["key"]) & (done["tuned_json"] == row["tuned_json"])]["seed"]
        assert trace["x"][-1] == 1.0 and len(trace["x"]) == row["n_layers"]
        if trace["xaxis"] == "x":  # the target's log probability: the mean over those seeds
            assert trace["y"][-1] == pytest.approx(-1.0 - 0.1 * seeds.mean())
        if trace["xaxis"] == "x3":  # the KL to the layer before
            assert trace["y"][0] == pytest.approx(0.5)
        assert trace["line"]["dash"] == ("solid" if row["family"] == "variable_width" else "dash")
    legend = [t for t in fig.data if t.get("showlegend") is not False]
    assert len(fig.data) == 3 * len(legend)
    ids = [figure_id for figure_id, _ in applicable_figures(trials, load_curves(root), layers)]
    assert ids.index("lens") == ids.index("layers") + 1
    assert '"id": "lens"' in build_payload(root)
    older = layers.assign(lens_logprob=np.nan, lens_entropy=np.nan, lens_kl=np.nan)
    assert lens_figure(trials, older) is None and layers_figure(trials, older) is not None


def test_budget_labels_cluster_iso_budget_sweeps():
    frame = pd.DataFrame({"params_non_embedding": [100e6, 101e6, 99e6, 400e6, 404e6],
                          "params_total": [np.nan] * 5})
    labels = budget_labels(frame)
    assert labels.nunique() == 2 and labels[0] == labels[2] and labels[3] == labels[4]
    spread = pd.DataFrame({"params_non_embedding": np.geomspace(1e6, 1e9, 40), "params_total": 0})
    assert budget_labels(spread).nunique() <= 6


def test_user_strings_are_escaped_in_plots_and_payload(store, frames):
    trials, _ = frames
    row = trials.iloc[0].copy()
    row["sweep"] = HOSTILE
    assert HOSTILE not in hover_text(row) and esc(HOSTILE) in hover_text(row)
    payload = build_payload(store)
    spaces = {s["name"]: s.get("space") for s in json.loads(payload)["sweeps"]}
    assert spaces["shapes"] == HOSTILE  # the text itself survives, as data
    safe = script_safe(payload)
    assert "<" not in safe and json.loads(safe) == json.loads(payload)


def _decoded(value):
    """A figure's JSON as plotly.js reads it: typed arrays ({"dtype", "bdata"}) and numpy
    arrays as lists, NaN as None."""
    if isinstance(value, dict) and set(value) == {"dtype", "bdata"}:
        value = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype("<" + value["dtype"]))
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_decoded(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


def test_every_figure_is_one_plotly_accepts_and_sends_the_same(frames, store):
    """The figures are plain dicts that nothing checks as they are built: plotly's own Figure
    takes each (it raises on a property it does not know) and sends the same figure."""
    trials, curves = frames
    figures = applicable_figures(trials.assign(budget=budget_labels(trials)), curves, load_layers(store))
    figures += analysis_views(trials)
    assert len(figures) >= 10
    for figure_id, fig in figures:
        checked = go.Figure(fig.to_dict()).to_dict()
        assert _decoded(checked) == _decoded(fig.to_dict()), figure_id


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("cols", [1, 2, 3])
def test_subplots_are_laid_out_as_plotly_lays_them_out(rows, cols):
    """`Figure.subplots` (no plotly figure built) gives make_subplots' axes, domains and titles."""
    for options in (dict(shared_yaxes=True, horizontal_spacing=0.04, vertical_spacing=0.3 / rows),
                    dict(subplot_titles=[f"panel {i}" for i in range(rows * cols - 1)], vertical_spacing=0.5 / rows),
                    {}):
        want = make_subplots(rows=rows, cols=cols, **options).to_dict()["layout"]
        got = Figure.subplots(rows, cols, **options).layout
        assert {**got, "template": None} == {**want, "template": None}, options


def test_report_is_one_offline_file_written_atomically(store, tmp_path):
    out = write_report(store, ["ucurve", "mlp"], tmp_path / "r" / "report.html")
    html = out.read_text()
    assert "<script src=" not in html and 'rel="stylesheet"' not in html  # all inline
    assert "Plotly" in html and len(html) > 3_000_000  # plotly.js itself is inside
    payload = json.loads(html.split('id="payload">', 1)[1].split("</script>", 1)[0])
    assert {s["name"] for s in payload["sweeps"]} == {"ucurve", "mlp"}
    assert os.listdir(out.parent) == ["report.html"]  # no temporary file left behind
    with pytest.raises(UserError, match="no sweep named 'nope'"):
        write_report(store, ["nope"], tmp_path / "x.html")
    assert not (tmp_path / "x.html").exists()


def test_cli_writes_the_report_and_refuses_unknown_sweeps(store, tmp_path):
    out = tmp_path / "cli.html"
    ok = subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", "dashboard", "ucurve", "--root", store,
                         "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert out.exists()
    bad = subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", "dashboard", "nope", "--root", store,
                          "--out", str(tmp_path / "bad.html")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [bad.stderr.strip()] and "nope" in bad.stderr


def test_hover_leaves_out_beta_and_alpha_of_a_constant_width_model():
    from shapesweep.dashboards.frames import hover_text

    row = dict(sweep="s", family="variable_width", trial_id="t", d_model=64, n_layers=6,
               d_h=170, beta=0.5, alpha=0.3, params_total=1, params_non_embedding=1,
               flops_per_token=1)
    assert "beta=" not in hover_text({**row, "shape": "constant"})
    assert "beta=0.5 alpha=0.3" in hover_text({**row, "shape": "bottleneck"})


def test_hover_names_the_trial_by_its_candidate_and_seed():
    """The hover title says which candidate (variant and shape) and seed, not a hash key
    (the page builds the same title: `test_dashboard_browser` compares the two)."""
    row = dict(sweep="s", family="hourglass", variant="hourglass", trial_id="f4893ea6c483-s2",
               key="f4893ea6c483", seed=2, d_model=80, n_layers=6, d_h=37, k=2, params_total=1,
               params_non_embedding=1, flops_per_token=1)
    title = hover_text(row).split("<br>")[0]
    assert title == "<b>s</b> · hourglass 80×6L d_h=37 k=2 · seed 2"
    frame = with_derived(pd.DataFrame([{**row, "tuned_json": "{}", "status": "completed", "tokens": 1}]))
    assert frame["hover"][0].split("<br>")[0] == title and frame["label"][0] == "hourglass 80×6L d_h=37 k=2"


def _demo_frames(root: Path, sweeps: tuple[str, ...] = ("demo-ucurve",)):
    """demo-ucurve's candidates with the README's losses (`synthetic.write_demo_like`), as the
    report gives them to the figures."""
    write_demo_like(str(root), sweeps)
    return with_derived(load_trials(str(root))), load_curves(str(root))


def test_a_width_depth_sweep_draws_one_iso_budget_figure_its_u_curve_with_every_design(tmp_path):
    """The iso-budget and U-curve figures drew the same points against d_model / n_layers (the
    U-curve without the hourglass, which sampled 2 ratios): now the U-curve is the one figure,
    every candidate in it, and the searched-dimension figure is for other sweeps."""
    trials, curves = _demo_frames(tmp_path)
    figures = dict(applicable_figures(trials, curves))
    assert "ucurve" in figures and "searched-lm" not in figures
    points = {t["name"]: len(t["x"]) for t in figures["ucurve"].data if t.get("meta", {}).get("rows")}
    assert points == {"conventional": 3, "hourglass k=2": 2}  # all 5 candidates


def _sweep_colours(fig) -> dict[str, set[str]]:
    """Trace name less its ` · SWEEP` suffix -> the colours its sweeps are drawn in."""
    colours: dict[str, set[str]] = {}
    for t in fig.data:
        name, _, sweep = (t.get("name") or "").rpartition(" · ")
        c = (t.get("line") or {}).get("color") or (t.get("marker") or {}).get("color")
        if name and sweep and isinstance(c, str):
            colours.setdefault(name, set()).add(c)
    return colours


def test_two_sweeps_of_one_space_are_drawn_in_two_colours(tmp_path):
    trials, curves = _demo_frames(tmp_path, ("demo-ucurve", "demo-ucurve-2"))
    figures = [*applicable_figures(trials, curves), ("searched-lm", searched_figure(trials))]
    checked = 0
    for figure_id, fig in figures:
        for name, colours in _sweep_colours(fig).items():
            assert len(colours) == 2, (figure_id, name, colours)
            checked += 1
    assert checked >= 8  # the baseline's dashed line, the iso-budget series, the curves, ...


def _planned_sweep(root: Path, space: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every candidate a built-in space plans (real shapes and accounting), 2 seeds each
    with noisy losses, through the store, as the report gives them to the figures."""
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import load_space

    rng = np.random.default_rng(0)
    for c in plan(load_space(space)).candidates:
        for seed in range(2):
            write_trial(str(root), "s", c.to_row() | {
                "sweep": "s", "trial_id": f"{c.key}-s{seed}", "seed": seed, "status": "completed",
                "val_loss": 2 + rng.normal(0, 0.02), "tokens": 1000, "tuned_json": "{}"}, [])
    return with_derived(load_trials(str(root))), load_curves(str(root))


def _axis_ids(ids: list[str]) -> list[str]:
    return [i for i in ids if i in ("ucurve", "ratio") or i.startswith("axis-lm-")]


def test_the_report_plots_loss_against_each_axis_the_space_varies_its_own_first(tmp_path):
    """A space that varies the FFN ratio (d_model at fixed L, d_h solved) leads with loss
    against d_h / d_model, not with the d_model / L U-curve that moves with it; k gets its
    own figure; a width/depth space still leads with its U-curve; the ><former's beta and
    alpha are each an axis."""
    trials, curves = _planned_sweep(tmp_path / "ratio", "hourglass-ffn-ratio-small")
    figures = dict(applicable_figures(trials, curves))
    axes = _axis_ids(list(figures))
    assert axes[0] == "ratio" and "axis-lm-k" in axes and "searched-lm" not in figures
    ratios = {round(x, 6) for t in figures["ratio"].data if (t.get("meta") or {}).get("rows") for x in t["x"]}
    assert len(ratios) >= 2 and ratios <= {round(x, 6) for x in trials["ffn_ratio"]}  # loss against d_h / d_model
    trials, curves = _planned_sweep(tmp_path / "ucurve", "demo-ucurve")
    assert _axis_ids([i for i, _ in applicable_figures(trials, curves)])[0] == "ucurve"
    trials, curves = _planned_sweep(tmp_path / "vformer", "vformer-beta-alpha-small")
    figures = dict(applicable_figures(trials, curves))
    assert {"axis-lm-beta", "axis-lm-alpha"} <= set(figures)
    for axis in ("beta", "alpha"):
        xs = {x for t in figures[f"axis-lm-{axis}"].data for x in t["x"]}
        assert len(xs) >= 2 and xs <= set(trials[axis].dropna())
