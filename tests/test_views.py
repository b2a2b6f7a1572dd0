"""The analysis views' data: fANOVA importance through Optuna over rows of the real store,
fields that only relabel another, and the one-line notes of views with too few candidates."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from synthetic import synthetic_sweep, write_synthetic

from shapesweep.dashboards import views as views_module
from shapesweep.dashboards.figures import applicable_figures
from shapesweep.dashboards.frames import human, with_derived
from shapesweep.dashboards.report import build_payload
from shapesweep.dashboards.views import MIN_IMPORTANCE, MISSING, analysis_views, sweep_views, twins
from shapesweep.results.schema import TRIAL_COLUMNS
from shapesweep.results.store import load_curves, load_trials, write_trial
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import config_key, make_config


def _grid(root, loss, seeds: int = 1, n: int | None = None) -> pd.DataFrame:
    """Conventional models on a grid of independent d_model x n_layers x d_h (the first `n`)
    through the real store, their loss `loss(config, seed)`."""
    grid = list(itertools.product((32, 64, 96), (1, 2, 3, 4), (64, 128)))[:n]
    for i, (d_model, n_layers, d_h) in enumerate(grid):
        config = make_config({"family": "conventional", "d_model": d_model, "n_layers": n_layers,
                              "d_h": d_h, "n_heads": 2, "vocab_size": 256})
        shape = {k: v for k, v in {**config.model_dump(), **account(config).to_dict()}.items()
                 if k in TRIAL_COLUMNS.names}
        shape.update(ffn_ratio=config.ffn_ratio, width_depth_ratio=config.width_depth_ratio)  # as a sweep's rows
        for seed in range(seeds):
            write_trial(root, "s", {**shape, "trial_id": f"t{i}-{seed}", "key": config_key(config),
                                    "seed": seed, "status": "completed", "val_loss": loss(config, seed)}, [])
    return with_derived(load_trials(root, ["s"]))


def _store(root, loss) -> pd.DataFrame:
    """Random conventional and hourglass shapes at one budget, their loss `loss(row)`."""
    for row, curves in synthetic_sweep("s", 40, families=("conventional", "hourglass"),
                                       budgets=(30e6,), seeds=1, tune=None, seed=4):
        write_trial(root, "s", {**row, "val_loss": loss(row)}, curves)
    return with_derived(load_trials(root, ["s"]))


def _views(trials: pd.DataFrame) -> dict:
    return {fid.rsplit("-", 1)[0]: fig for fid, fig in sweep_views(0, trials)}


def test_a_large_sweeps_importance_is_fitted_on_a_sample_and_says_so(tmp_path, monkeypatch):
    trials = _grid(tmp_path, lambda config, seed: 2.0 + 0.1 * config.n_layers)
    monkeypatch.setattr(views_module, "FANOVA_SAMPLE", 16)
    views = _views(trials)
    assert views["views-importance"].layout["title"]["text"].endswith("24 candidates (mean over seeds), a random 16 of them")
    bars = views["views-importance"].data[0]
    assert sum(bars["x"]) == pytest.approx(1.0) and bars["y"][-1] == "n_layers"  # the top bar


def test_the_importance_finds_the_field_the_loss_depends_on(tmp_path):
    trials = _grid(tmp_path, lambda config, seed: 2.0 + 0.1 * config.n_layers + 0.001 * (config.d_h == 64))
    views = _views(trials)
    bars = views["views-importance"].data[0]
    shares = dict(zip(bars["y"], bars["x"], strict=True))
    assert sum(shares.values()) == pytest.approx(1.0)
    assert set(shares) == {"d_model ≡ head_dim", "n_layers", "d_h", "ffn_ratio", "width_depth_ratio"}
    assert shares["n_layers"] > 0.95 and shares["d_h"] > shares["d_model ≡ head_dim"]
    # The slices follow the ranking: the first panel is the top field.
    assert views["views-slices"].layout["xaxis"]["title"]["text"] == "n_layers"


def test_a_field_missing_for_some_candidates_is_a_category(tmp_path):
    trials = _store(tmp_path, lambda row: 2.0 + (0.3 if row["family"] == "hourglass" else 0.0))
    parallel = _views(trials)["views-parallel"].data[0]
    k = next(d for d in parallel["dimensions"] if d["label"] == "k")
    assert MISSING in k["ticktext"] and len(k["values"]) == len(parallel["dimensions"][-1]["values"])
    assert parallel["dimensions"][-1]["label"] == "validation loss"


def test_twins_group_the_fields_that_only_relabel_another():
    means = pd.DataFrame({"d_model": [256, 512, 768, 512], "n_heads": [4, 8, 12, 8],
                          "n_layers": [8, 4, 2, 4], "d_h": [64, 64, 128, 256]})
    assert twins(means, list(means)) == {"d_model": ["n_heads", "n_layers"], "d_h": []}


def test_a_view_with_too_few_candidates_says_so_in_one_line(tmp_path):
    trials = _grid(tmp_path, lambda config, seed: 2.0, n=2)
    for figure_id, fig in sweep_views(0, trials):
        (trace,) = fig.data
        assert trace["mode"] == "text" and trace["text"] == ["2 candidates with a result: the views need at least 3"]
        assert fig.layout["title"]["text"].endswith("s: 2 candidates (mean over seeds)"), figure_id
    few = _grid(tmp_path / "few", lambda config, seed: 2.0 + config.n_layers, n=MIN_IMPORTANCE - 1)
    views = _views(few)
    assert views["views-importance"].data[0]["text"] == [f"{MIN_IMPORTANCE - 1} candidates: fANOVA needs at "
                                                         f"least {MIN_IMPORTANCE}"]
    assert isinstance(views["views-parallel"].data[0]["dimensions"], list)  # still drawn


def test_points_are_candidates_averaged_over_seeds(tmp_path):
    trials = _grid(tmp_path, lambda config, seed: 2.0 + 0.01 * seed, seeds=3)
    slices = _views(trials)["views-slices"].data[0]
    assert len(slices["y"]) == 24 and np.allclose(slices["y"], 2.01)  # mean of seeds 0, 1, 2
    assert np.allclose(slices["error_y"]["array"], 0.01)  # their std


def test_the_report_payload_carries_every_sweeps_views(tmp_path):
    write_synthetic(str(tmp_path), "a", 40, families=("conventional",), budgets=(30e6,), seeds=1)
    write_synthetic(str(tmp_path), "b", 40, families=("hourglass",), budgets=(30e6,), seeds=1, seed=1)
    ids = [f["id"] for f in json.loads(build_payload(str(tmp_path)))["figures"]]
    assert [i for i in ids if i.startswith("views-")] == [
        f"views-{kind}-{n}" for n in (0, 1) for kind in ("parallel", "importance", "slices")]
    assert analysis_views(with_derived(load_trials(str(tmp_path), ["a"])))[0][0] == "views-parallel-0"


def test_the_vision_pareto_counts_w_in_and_names_the_trainable_part(tmp_path):
    """The hourglass-mlp paper counts W_in, fixed or trained, in its Pareto parameters."""
    write_synthetic(str(tmp_path), "mlp", 48, families=("vision_mlp",), budgets=(3e8,), seeds=1, seed=2)
    trials = with_derived(load_trials(str(tmp_path), ["mlp"]))
    assert set(trials["input_projection"]) == {"fixed", "trained"}
    fig = dict(applicable_figures(trials, load_curves(str(tmp_path), ["mlp"])))["pareto-vision-params_incl_frozen"]
    assert fig.layout["xaxis"]["title"]["text"] == "parameters incl. W_in (trainable + fixed)"
    points = [t for t in fig.data if t.get("meta") and t["meta"].get("rows")
              and not t["meta"].get("other_tuned") and not t["meta"].get("stopped")]
    shown = {int(p[0]): (x, text) for t in points
             for p, x, text in zip(t["customdata"], t["x"], t["text"], strict=True)}
    rows = trials.set_index("row_id")
    fixed = 0
    for row_id, (x, text) in shown.items():
        row = rows.loc[row_id]
        w_in = row["d_x"] * row["d_z"] if row["input_projection"] == "fixed" else 0
        assert row["params_frozen"] == w_in and x == row["params_total"] + w_in
        assert text.endswith(f"<br>{human(x)} parameters incl. W_in, {human(row['params_total'])} trainable")
        fixed += w_in > 0
    assert 0 < fixed < len(shown)
