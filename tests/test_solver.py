"""Iso-budget solver: hourglass-ffn's worked examples, ranges, constraints, dedupe, solve_point."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import yaml

from shapesweep.common import UserError
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import TrainConfig, config_key, make_config
from shapesweep.search_spaces.solver import candidate_document, plan, solve_point
from shapesweep.search_spaces.space import Range, load_space, parse_space

LM = {"n_heads": 12, "vocab_size": 50304, "activation": "swiglu"}


def space(**doc):
    doc.setdefault("name", "test")
    return parse_space(yaml.safe_load(yaml.safe_dump(doc)), file="test.yaml")


def test_fixed_attention_k_sweep_reproduces_hourglass_ffn_table1():
    result = plan(load_space("hourglass-fixed-attention-113m"))
    d_h = {c.config.k: c.config.d_h for c in result.candidates if c.config.family == "hourglass"}
    assert d_h == {5: 614, 6: 512, 8: 384, 10: 307}
    assert result.counts == {"raw": 5, "feasible": 5, "within_tolerance": 5, "unique": 5}
    baseline = next(c for c in result.candidates if c.config.family == "conventional")
    assert baseline.budget_error == 0  # the budget is the baseline's own count


def test_solve_d_model_at_113m_gives_1032():
    result = plan(space(family="hourglass", budget={"non_embedding_params": "113M"},
                        fixed={**LM, "n_layers": 12, "k": 4, "ffn_ratio": 0.4}, solve="d_model"))
    (candidate,) = result.candidates
    assert candidate.config.d_model == 1032
    assert candidate.config.d_h == round(0.4 * 1032)


@pytest.mark.parametrize("name,d_h", [("113m-hourglass", 418), ("403m-hourglass", 557),
                                      ("906m-hourglass", 819), ("1074m-hourglass", 2486)])
def test_scale_ladder_solves_the_papers_d_h(name, d_h):
    result = plan(load_space("hourglass-scale-ladder"))
    (candidate,) = [c for c in result.candidates if c.variant == name]
    assert abs(candidate.config.d_h - d_h) <= 2  # the paper leaves the norms out


def _brute_force_error(config, seq_len, target, dim, delta):
    fields = config.model_dump() | {dim: getattr(config, dim) + delta}
    try:
        other = make_config(fields)
    except ValueError:
        return np.inf
    return abs(account(other, seq_len).params_non_embedding - target)


@pytest.mark.parametrize("solve,search,step", [
    ("d_h", {"d_model": [384, 768, 1536], "n_layers": [6, 12, 24], "k": [1, 4]}, 1),
    ("n_layers", {"d_model": [384, 768, 1536], "d_h": [200, 1000], "k": [1, 4]}, 1),
    ("d_model", {"n_layers": [6, 12, 24], "ffn_ratio": [0.25, 1.0], "k": [1, 3]}, 24),
])
def test_rounding_picks_the_better_neighbour(solve, search, step):
    """Every candidate meets the budget per account(), and no neighbour of the solved dim does better."""
    target = 60e6
    result = plan(space(family="hourglass", budget={"non_embedding_params": target, "tolerance": 0.2},
                        fixed=LM, search=search, solve=solve))
    assert result.candidates
    for c in result.candidates:
        acc = account(c.config, 128)
        assert c.accounting == acc
        assert c.budget_error == pytest.approx((acc.params_non_embedding - target) / target)
        mine = abs(acc.params_non_embedding - target)
        for delta in (-step, step):
            if solve == "d_model":  # d_h follows d_model through ffn_ratio
                ratio = c.config.d_h / c.config.d_model
                fields = c.config.model_dump() | {"d_model": c.config.d_model + delta}
                fields |= {"d_h": round(round(ratio, 2) * fields["d_model"]), "head_dim": None}
                other = abs(account(make_config(fields), 128).params_non_embedding - target)
            else:
                other = _brute_force_error(c.config, 128, target, solve, delta)
            assert mine <= other


def test_width_depth_pair_follows_the_ratio_and_the_budget():
    result = plan(space(family="hourglass", budget={"non_embedding_params": "113.2M", "tolerance": 0.03},
                        fixed={**LM, "k": 4, "ffn_ratio": 0.4},
                        search={"width_depth_ratio": {"min": 25, "max": 400, "num": 6, "log": True}},
                        solve=["d_model", "n_layers"]))
    ratios = Range(min=25, max=400, num=6, log=True).values()
    assert len(result.candidates) >= 4
    for c in result.candidates:
        closest = min(ratios, key=lambda r: abs(np.log(c.config.width_depth_ratio / r)))
        # d_model moves in steps of 24 and L in steps of 1, so the ratio is met to that rounding
        lo = (c.config.d_model - 24) / (c.config.n_layers + 1)
        hi = (c.config.d_model + 24) / max(c.config.n_layers - 1, 0.5)
        assert lo <= closest <= hi
        assert abs(c.budget_error) <= 0.03


def test_width_and_d_h_pair_meets_a_tight_budget_near_the_searched_ratio():
    """solve [d_model, d_h] from ffn_ratio: d_model moves in steps of 24, so solving it alone
    misses 113.2M by up to 2.3% on hourglass-ffn Fig. 3's grid at L 12; with d_h solved again at the
    rounded d_model every point meets 1%, near its ratio."""
    grid = {"k": [2, 4, 8], "ffn_ratio": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0]}
    common = dict(family="hourglass", fixed={**LM, "n_layers": 12}, search=grid)
    alone = plan(space(**common, budget={"non_embedding_params": "113.2M", "tolerance": 0.04},
                       solve="d_model"))
    assert max(abs(c.budget_error) for c in alone.candidates) > 0.02
    pair = plan(space(**common, budget={"non_embedding_params": "113.2M", "tolerance": 0.01},
                      solve=["d_model", "d_h"]))
    assert pair.counts["within_tolerance"] == 24 and not pair.dropped
    for c in pair.candidates:
        assert c.accounting == account(c.config, 128) and abs(c.budget_error) <= 0.01
        closest = min(grid["ffn_ratio"], key=lambda r: abs(np.log(c.config.ffn_ratio / r)))
        assert abs(np.log(c.config.ffn_ratio / closest)) < 0.1 and c.config.d_model % 24 == 0
    with pytest.raises(UserError, match="needs ffn_ratio"):
        space(family="hourglass", budget={"non_embedding_params": "113.2M"},
              fixed={**LM, "n_layers": 12, "k": 2}, solve=["d_model", "d_h"])
    with pytest.raises(UserError, match=r"\[d_model, n_layers\] \(with width_depth_ratio\) or "
                                         r"\[d_model, d_h\] \(with ffn_ratio\)"):
        space(family="hourglass", budget={"non_embedding_params": "113.2M"},
              fixed={**LM, "d_model": 768, "k": 2}, solve=["n_layers", "d_h"])


def test_ranges_expand_as_documented():
    assert Range(min=1, max=10, step=3).values(integer=True) == [1, 4, 7, 10]
    assert Range(min=0.1, max=0.5, num=5).values() == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert Range(min=25, max=400, num=5, log=True).values() == pytest.approx([25, 50, 100, 200, 400])
    assert Range(min=2, max=40, step=2, log=True).values(integer=True) == [2, 4, 8, 16, 32]
    assert Range(min=1, max=3, num=7).values(integer=True) == [1, 2, 3]  # ints dedupe


def test_range_values_reach_the_solver():
    s = space(family="hourglass", budget={"non_embedding_params": "113.2M", "tolerance": 0.05},
              fixed={**LM, "d_model": 768, "n_layers": 12}, search={"k": {"min": 2, "max": 8, "step": 2}},
              solve="d_h")
    assert sorted(c.config.k for c in plan(s).candidates) == [2, 4, 6, 8]


def test_width_depth_pair_meets_the_budget_at_a_few_layers():
    """Rounding d_model and L together misses a small budget badly at 1-3 layers; fixing L
    at floor/ceil and solving d_model alone meets it. Every ratio of a log grid survives
    (within √2 of its target), except one that no shape within budget comes near."""
    tiny = dict(family="hourglass", budget={"non_embedding_params": "263K", "tolerance": 0.05},
                fixed={"n_heads": 2, "vocab_size": 256, "k": 2, "ffn_ratio": 0.5},
                solve=["d_model", "n_layers"])
    result = plan(space(**tiny, search={"width_depth_ratio": [6, 12, 24, 48, 96, 192]}))
    assert result.counts["within_tolerance"] == 6 and not result.dropped
    layers = sorted(c.config.n_layers for c in result.candidates)
    assert layers[:2] == [1, 2]  # the wide, shallow arm of the U is reachable
    for c in result.candidates:
        assert abs(c.budget_error) <= 0.05
    k4 = plan(space(**{**tiny, "fixed": {**tiny["fixed"], "k": 4}},
                    search={"width_depth_ratio": [48, 96]}))
    assert [d.point for d in k4.dropped] == [{"width_depth_ratio": 96}]
    assert "more than a factor √2 from the target" in k4.dropped[0].reason
    assert "1 of 2 grid points" in k4.dropped_lines()[0]


def test_dropped_points_name_their_reason():
    result = plan(space(family="hourglass", budget={"non_embedding_params": "50M", "tolerance": 0.01},
                        fixed={**LM, "k": 2}, solve="d_h", constraints=["n_layers % 4 == 0"],
                        search={"d_model": [384, 390, 4104], "n_layers": [4, 6]}))
    reasons = {(d.point["d_model"], d.point["n_layers"]): d.reason for d in result.dropped}
    assert reasons[(390, 4)].startswith("invalid shape")                     # 12 heads ∤ 390
    assert reasons[(384, 6)] == "breaks the constraint 'n_layers % 4 == 0'"
    assert reasons[(4104, 4)].startswith("closest budget error +")        # attention alone > 50M
    assert (384, 4) not in reasons and len(result.candidates) == 1
    lines = result.dropped_lines(limit=2)
    assert lines[0] == "dropped 5 of 6 grid points:" and lines[-1] == "  ... and 3 more"
    assert lines[1].startswith("  hourglass: d_model=")


def test_constraints_filter_candidates_with_numpy_expressions():
    base = dict(family="hourglass", budget={"non_embedding_params": "50M", "tolerance": 0.05},
                fixed={**LM, "k": 2}, search={"d_model": [384, 576, 768, 960], "n_layers": [4, 6, 8, 10, 12]},
                solve="d_h")
    everything = plan(space(**base))
    constrained = plan(space(**base, constraints=["n_layers % 4 == 0",
                                                  "params_attention < params_ffn", "d_h >= 64"]))
    assert 0 < constrained.counts["feasible"] < everything.counts["feasible"]
    assert constrained.counts["raw"] == everything.counts["raw"] == 20
    for c in constrained.candidates:
        assert c.config.n_layers % 4 == 0 and c.config.d_h >= 64
        assert c.accounting.params_attention < c.accounting.params_ffn
    expected = {c.key for c in everything.candidates
                if c.config.n_layers % 4 == 0 and c.config.d_h >= 64
                and c.accounting.params_attention < c.accounting.params_ffn}
    assert {c.key for c in constrained.candidates} == expected


def test_duplicates_are_dropped():
    """Ratios 0.40 and 0.401 land on the same rounded shape: one candidate, counted once."""
    result = plan(space(family="hourglass", budget={"non_embedding_params": "113M", "tolerance": 0.02},
                        fixed={**LM, "n_layers": 12, "k": 4}, search={"ffn_ratio": [0.4, 0.4001, 0.8]},
                        solve="d_model"))
    assert result.counts["within_tolerance"] == 3
    assert result.counts["unique"] == len(result.candidates) == 2
    assert len({c.key for c in result.candidates}) == 2


def test_invalid_points_are_not_feasible():
    """d_model 100 with 12 heads is not divisible; 36 heads of 768 give an odd head_dim."""
    result = plan(space(family="conventional", budget={"non_embedding_params": "20M", "tolerance": 0.5},
                        fixed={"vocab_size": 256, "n_layers": 4},
                        search={"d_model": [100, 768], "n_heads": [12, 36]}, solve="d_h"))
    assert result.counts["raw"] == 4 and result.counts["feasible"] == 1
    assert [(c.config.d_model, c.config.n_heads) for c in result.candidates] == [(768, 12)]


def test_solve_point_matches_plan_and_returns_none_when_infeasible():
    s = load_space("hourglass-ucurve-113m")
    result = plan(s)
    hourglass = s.resolved()[1]
    for k, ratio, wdr in itertools.islice(itertools.product(
            hourglass.grid_values()["k"], hourglass.grid_values()["ffn_ratio"],
            hourglass.grid_values()["width_depth_ratio"]), 0, 54, 7):
        single = solve_point(s, {"variant": "hourglass", "k": k, "ffn_ratio": ratio, "width_depth_ratio": wdr})
        in_plan = [c for c in result.candidates if single and c.key == single.key]
        assert single is None or in_plan
    off_grid = solve_point(s, {"variant": 1, "k": 3, "ffn_ratio": 0.5, "width_depth_ratio": 80.0})
    assert off_grid is not None and abs(off_grid.budget_error) <= 0.02
    assert solve_point(s, {"variant": 1, "k": 3, "ffn_ratio": 0.5, "width_depth_ratio": 1e5}) is None


def test_candidate_document_round_trips():
    s = load_space("vformer-vs-constant-small")
    for c in plan(s).candidates:
        doc = candidate_document(c, s.train)
        assert set(doc) == {"family", "model", "train"}
        again = make_config(doc["model"] | {"family": doc["family"]})
        assert config_key(again) == c.key
        assert TrainConfig(**doc["train"]) == s.train
        assert account(again, s.train.seq_len) == c.accounting


def test_to_row_has_the_design_candidate_columns():
    (row, *_) = [c.to_row() for c in plan(load_space("hourglass-fixed-attention-small")).candidates]
    for column in ("key", "family", "d_model", "n_layers", "n_heads", "head_dim", "d_h", "ffn_ratio",
                   "width_depth_ratio", "widths", "params_total", "params_non_embedding",
                   "params_attention", "params_ffn", "flops_per_token", "kv_cache_per_token",
                   "avg_layer_width", "budget_error"):
        assert column in row


def test_impossible_budget_names_the_reachable_interval():
    s = space(family="hourglass", budget={"non_embedding_params": "1e15"},
              fixed={**LM, "d_model": 768, "n_layers": 12, "k": 4}, solve="d_h")
    with pytest.raises(UserError, match=r"out of reach.*\[.*\]") as error:
        plan(s)
    assert error.value.key == "budget" and error.value.file == "test.yaml"


def test_nothing_within_tolerance_names_the_closest():
    s = space(family="conventional", budget={"non_embedding_params": "30M", "tolerance": 0.001},
              fixed={**LM, "d_h": 3072}, search={"d_model": [384, 768], "n_layers": [2, 3, 4]})
    with pytest.raises(UserError, match=r"closest is d_model=768 .*n_layers=3.* budget error") as error:
        plan(s)
    assert error.value.key == "budget.tolerance"


def test_variant_budgets_and_family_lists():
    s = space(family=["conventional", "hourglass"], budget={"non_embedding_params": "10M", "tolerance": 0.05},
              fixed={"n_heads": 4, "vocab_size": 256, "d_model": 256}, search={"n_layers": [4, 8]}, solve="d_h")
    families = sorted({c.config.family for c in plan(s).candidates})
    assert families == ["conventional", "hourglass"]
