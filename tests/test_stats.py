"""Seed statistics, baseline comparisons and rank fidelity (results/stats.py) and
`shapesweep status --format`, on hand-made trials written through the real results store.

Every expected number is computed here with plain arithmetic and scipy.stats.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re

import pytest
from scipy import stats as sps

from shapesweep.common import UserError
from shapesweep.results.stats import (
    asha_confirmation,
    compare,
    paired_difference,
    rank_fidelity,
    seeds_for_power,
    stable_fraction,
    tuned_stats,
)
from shapesweep.results.store import load_curves, load_trials, write_sweep_file, write_trial
from shapesweep.sweep.cli.main import main as shapesweep

SEEDS = (0, 1, 2)
TOKENS = (100, 200, 300)  # evaluation points; the last is the end of the run
# key -> (variant, family, d_model, {lr: final val_loss per seed 0, 1, 2}, the lr it should choose)
CANDIDATES = {
    "base": ("baseline", "conventional", 64, {0.003: (3.00, 3.02, 2.98), 0.001: (3.10, 3.12, 3.08)}, 0.003),
    "good": ("hourglass", "hourglass", 96, {0.003: (2.90, 2.93, 2.87), 0.001: (2.95, 2.96, 2.97)}, 0.003),
    "bad": ("hourglass", "hourglass", 128, {0.001: (3.20, 3.21, 3.19), 0.003: (3.30, 3.30, 3.30)}, 0.001),
    "noisy": ("hourglass", "hourglass", 80, {0.003: (2.95, 3.10, 2.97)}, 0.003),
    "lonely": ("hourglass", "hourglass", 112, {0.003: (2.50, None, None)}, 0.003),
}
# How far above its final loss each candidate starts: early rankings differ from the final one.
HEAD_START = {"base": 0.5, "good": 0.9, "bad": -0.2, "noisy": 0.1, "lonely": 0.3}


def _row(key: str, lr: float, seed: int, status: str, val_loss: float | None, **extra) -> dict:
    variant, family, d_model, _, _ = CANDIDATES.get(key, ("hourglass", "hourglass", 72, {}, None))
    return {"trial_id": f"{key}-{lr}-s{seed}", "key": key, "family": family, "seed": seed,
            "variant": variant, "tuned_json": json.dumps({"lr": lr}), "status": status,
            "val_loss": val_loss, "psnr": None if val_loss is None else 40 - 10 * val_loss,
            "d_model": d_model, "n_layers": 4, "d_h": d_model // 2,
            "k": None if family == "conventional" else 4,
            "params_non_embedding": 1_000_000, "params_total": 1_200_000, "params_active": 900_000,
            **extra}


def _curve(key: str, final: float) -> list[dict]:
    return [{"step": i + 1, "tokens": t, "val_loss": final + HEAD_START[key] * (1 - t / TOKENS[-1])}
            for i, t in enumerate(TOKENS)]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("stats"))
    for key, (_, _, _, runs, _) in CANDIDATES.items():
        for lr, finals in runs.items():
            for seed, final in zip(SEEDS, finals, strict=True):
                status = "completed" if final is not None else ("failed" if seed == 1 else "stopped_early")
                write_trial(root, "s", _row(key, lr, seed, status, final),
                            _curve(key, final) if final is not None else [])
    # ASHA's other stop decisions: a bad tuned value (a full run confirms it), and a
    # candidate that never completed (nothing to check it against).
    write_trial(root, "s", _row("bad", 0.003, 3, "stopped_early", 3.4), [])
    write_trial(root, "s", _row("ghost", 0.003, 0, "stopped_early", 3.5), [])
    write_sweep_file(root, "s", "sweep.json", json.dumps({"scheduler": "asha", "reduction_factor": 3}))
    return root


@pytest.fixture(scope="module")
def trials(root):
    return load_trials(root, ["s"])


def _paired(key: str) -> list[float]:
    """candidate - baseline per seed both completed, each at its chosen lr."""
    runs, lr = CANDIDATES[key][3], CANDIDATES[key][4]
    base = CANDIDATES["base"][3][CANDIDATES["base"][4]]
    return [c - b for c, b in zip(runs[lr], base, strict=True) if c is not None]


def _t_interval(diffs: list[float]) -> tuple[float, float, float]:
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def test_best_tuned_value_is_the_lowest_mean_over_seeds(trials):
    table = tuned_stats(trials)
    for key, (_, _, _, runs, chosen_lr) in CANDIDATES.items():
        for lr, finals in runs.items():
            done = [f for f in finals if f is not None]
            row = table[(table["key"] == key) & (table["tuned"] == json.dumps({"lr": lr}))].iloc[0]
            assert row["n"] == len(done)
            assert row["mean"] == pytest.approx(sum(done) / len(done))
            if len(done) > 1:
                mean = sum(done) / len(done)
                assert row["std"] == pytest.approx(math.sqrt(sum((f - mean) ** 2 for f in done) / (len(done) - 1)))
            else:
                assert math.isnan(row["std"])
            assert row["stopped"] == (key == "lonely" or (key, lr) == ("bad", 0.003))
            # lonely's one value had a seed stopped: the survivor's mean is no result
            assert row["chosen"] == (lr == chosen_lr and key != "lonely")
    assert "ghost" not in set(table["key"])  # no completed trial: no statistics


def test_paired_interval_and_verdicts_equal_a_hand_computation(trials):
    compared = compare(trials).set_index("key")
    expected = {"good": "better", "bad": "worse", "noisy": "within noise"}
    for key, verdict in expected.items():
        mean, low, high = _t_interval(_paired(key))
        row = compared.loc[key]
        assert row["delta_vs_baseline"] == pytest.approx(mean)
        assert (row["ci_low"], row["ci_high"]) == (pytest.approx(low), pytest.approx(high))
        assert row["n_paired"] == 3 and row["verdict"] == verdict and row["baseline_key"] == "base"
        assert row["no_verdict"] is None and row["state"] == "measured"
    # lonely: seed 0 completed (2.50, the best loss of all), seed 1 failed, seed 2 stopped by
    # ASHA. Its mean would be the survivor's: no mean, no interval, no verdict, and why.
    lonely = compared.loc["lonely"]
    assert lonely["state"] == "stopped" and lonely["no_verdict"] == "stopped"
    assert math.isnan(lonely["mean"]) and lonely["n"] == 0 and lonely["verdict"] is None
    assert lonely["delta_vs_baseline"] is None and lonely["ci_low"] is None
    assert list(compared.index)[:4] == ["good", "base", "noisy", "bad"]  # best mean first, then no mean
    assert set(compared.index[4:]) == {"lonely", "ghost"}
    assert compared.loc["ghost", "state"] == "stopped"  # only a stopped trial: listed, and why


def test_higher_is_better_metrics_flip_the_verdict(trials):
    """PSNR = 40 - 10 * loss: the same comparisons, mirrored."""
    compared = compare(trials, "psnr").set_index("key")
    for key, verdict in {"good": "better", "bad": "worse", "noisy": "within noise"}.items():
        mean, low, high = _t_interval([-10 * d for d in _paired(key)])
        assert compared.loc[key, "delta_vs_baseline"] == pytest.approx(mean)
        assert compared.loc[key, "ci_low"] == pytest.approx(low)
        assert compared.loc[key, "verdict"] == verdict
    assert list(compared.index)[:4] == ["good", "base", "noisy", "bad"]  # highest PSNR first


def test_paired_difference_of_two_series_by_seed():
    import pandas as pd

    base, cand = pd.Series([3.00, 3.02, 2.98, 3.1], index=[0, 1, 2, 3]), pd.Series([2.95, 3.10, 2.97], index=[0, 1, 2])
    result = paired_difference(cand, base)  # seed 3: the baseline's alone, unpaired
    mean, low, high = _t_interval([-0.05, 0.08, -0.01])
    assert result["n_paired"] == 3 and result["delta"] == pytest.approx(mean)
    assert (result["ci_low"], result["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    assert result["verdict"] == "within noise"
    one = paired_difference(cand[[0]], base)
    assert one["n_paired"] == 1 and one["delta"] == pytest.approx(-0.05)
    assert one["ci_low"] is None and one["verdict"] is None  # no interval, no verdict


def _seeds_for_power_by_hand(delta: float, sd: float, alpha: float = 0.05) -> int:
    """The smallest n >= 2 whose two-sided paired t-test at level `alpha` rejects zero with
    probability >= 0.8 at this true difference: scipy's noncentral t, one n after another."""
    n = 2
    while True:
        crit, nc = sps.t.ppf(1 - alpha / 2, n - 1), delta / sd * math.sqrt(n)
        if sps.nct.sf(crit, n - 1, nc) + sps.nct.cdf(-crit, n - 1, nc) >= 0.8:
            return n
        n += 1


def test_seeds_for_80pct_power_recomputed_by_hand_from_the_stored_rows(trials):
    """noisy - base per seed: -0.05, +0.08, -0.01 (stored rows); its interval holds zero, so
    it carries the paired seeds that would resolve that difference at 80% power: at the
    family's adjusted level (Holm: Bonferroni's 0.05 / 3 over good, bad and noisy), or at 5%
    unadjusted."""
    diffs = _paired("noisy")
    mean, sd = sum(diffs) / 3, math.sqrt(sum((d - sum(diffs) / 3) ** 2 for d in diffs) / 2)
    row = compare(trials).set_index("key").loc["noisy"]
    assert row["verdict"] == "within noise" and row["family_size"] == 3
    assert row["seeds_for_80pct_power"] == _seeds_for_power_by_hand(mean, sd, 0.05 / 3)
    raw = compare(trials, adjust="none").set_index("key").loc["noisy"]
    assert raw["seeds_for_80pct_power"] == _seeds_for_power_by_hand(mean, sd)
    resolved = compare(trials).set_index("key")
    assert resolved.loc["good", "seeds_for_80pct_power"] is None  # resolved: nothing to add
    # Cohen's textbook values for a paired t-test (two-sided, 5%, 80% power): d = 0.5 needs
    # 34 pairs, d = 0.8 needs 15, d = 1.0 needs 10; no difference needs infinitely many.
    assert seeds_for_power([0.5, 0.8, 1.0], [1.0, 1.0, 1.0]).tolist() == [34, 15, 10]
    assert math.isnan(seeds_for_power(0.0, 1.0)) and seeds_for_power(5.0, 1.0) == _seeds_for_power_by_hand(5.0, 1.0)


def test_seeds_for_power_gives_the_small_count_a_large_effect_needs():
    """A large effect needs few seeds, never NaN: scipy's lower tail (P(T < -crit), ~0 there)
    underflows to NaN at a large noncentrality, which once read as "not enough" and ran the
    search to its cap. The count never rises as the effect grows, at every family level; an
    effect with no spread (sd 0) needs the 2 seeds any test needs."""
    effects = [0.5, 1.0, 5.0, 10.0, 30.0, 50.0, 100.0, 1e3, 1e6]
    for confidence in (0.95, 0.99, 0.999, 0.9999):
        needed = seeds_for_power(effects, [1.0] * len(effects), confidence=confidence).tolist()
        assert all(n == n and 2 <= n <= 100 for n in needed), (confidence, needed)
        assert needed == sorted(needed, reverse=True), (confidence, needed)
    # at 99%, d = 30: 2 pairs give power 0.49 (one degree of freedom, heavy tails), 3 give ~1
    assert seeds_for_power(30.0, 1.0, confidence=0.99) == 3
    assert seeds_for_power(1e6, 1.0) == 2 and seeds_for_power(0.3, 0.0) == 2
    assert math.isnan(seeds_for_power(0.0, 0.0))


def test_rank_fidelity_counts_only_pairs_whose_final_difference_is_resolved(root, trials):
    """Kendall's tau over the pairs of candidates whose paired 95% interval at the end
    excludes zero, recomputed from the stored rows; unresolved pairs are counted apart and
    never as swaps. lonely (stopped) has no result and takes no part."""
    fidelity = rank_fidelity(trials, load_curves(root, ["s"])).set_index("tokens")
    finals = {key: spec[3][spec[4]] for key, spec in CANDIDATES.items() if key != "lonely"}
    keys = sorted(finals)
    resolved = {}
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            mean, low, high = _t_interval([x - y for x, y in zip(finals[a], finals[b], strict=True)])
            if low > 0 or high < 0:
                resolved[(a, b)] = math.copysign(1, mean)
    assert 0 < len(resolved) < 6  # some pairs resolved, some not: the test tells them apart
    assert list(fidelity.index) == list(TOKENS)
    for tokens in TOKENS:
        at = {k: sum(finals[k]) / 3 + HEAD_START[k] * (1 - tokens / TOKENS[-1]) for k in keys}  # seed means there
        signs = [math.copysign(1, at[a] - at[b]) * order for (a, b), order in resolved.items()]
        row = fidelity.loc[tokens]
        assert row["resolved_pairs"] == len(resolved) and row["unresolved_pairs"] == 6 - len(resolved)
        assert row["swapped_resolved_pairs"] == signs.count(-1)
        assert row["kendall_tau"] == pytest.approx((signs.count(1) - signs.count(-1)) / len(resolved))
        assert row["n_candidates"] == 4 and row["budget_fraction"] == pytest.approx(tokens / TOKENS[-1])
    assert fidelity.loc[TOKENS[-1], "kendall_tau"] == pytest.approx(1.0)
    # Over all pairs (Kendall's tau of every candidate) some point ranks differently: there an
    # unresolved pair is out of its final order, and here that is not a swap.
    final = [sum(finals[k]) / 3 for k in keys]
    everyone = [sps.kendalltau([f + HEAD_START[k] * (1 - t / TOKENS[-1]) for k, f in zip(keys, final, strict=True)],
                               final).statistic for t in TOKENS]
    assert everyone != pytest.approx(fidelity["kendall_tau"].tolist())


def test_rank_fidelity_ranks_on_another_curve_column(root, trials):
    """A curve column other than the metric (a cooled loss) ranks the points; the pairs
    are still resolved by the final metric."""
    curves = load_curves(root, ["s"])
    flipped = curves.assign(val_loss_cooled=-curves["val_loss"])  # every order reversed
    cooled = rank_fidelity(trials, flipped, curve_metric="val_loss_cooled").set_index("tokens")
    plain = rank_fidelity(trials, curves).set_index("tokens")
    assert cooled.loc[TOKENS[-1], "kendall_tau"] == pytest.approx(-1.0)
    assert (cooled["resolved_pairs"] == plain["resolved_pairs"]).all()


def test_stable_fraction_is_where_tau_stays_above_the_threshold():
    import pandas as pd

    frame = pd.DataFrame({"tokens": [1, 2, 3, 4, 5], "budget_fraction": [0.2, 0.4, 0.6, 0.8, 1.0],
                          "kendall_tau": [0.9, 0.5, 0.85, 0.8, 1.0]})
    assert stable_fraction(frame) == 0.6  # 0.9 at 20% does not count: it dips after
    assert stable_fraction(frame.assign(kendall_tau=[0.9, 0.9, 0.9, 0.9, 0.7])) is None
    assert stable_fraction(frame.assign(kendall_tau=[float("nan"), 0.9, 0.9, 0.9, 1.0])) == 0.4
    # Kendall's tau of 5 candidates with 1 discordant pair of 10 is 0.8 up to rounding.
    four_fifths = sps.kendalltau([1, 2, 3, 5, 4], [1, 2, 3, 4, 5]).statistic
    assert stable_fraction(frame.assign(kendall_tau=[0.5, 0.5, four_fifths, 1.0, 1.0])) == 0.6


def test_asha_confirmation_counts_decisions_a_full_run_confirms(trials):
    # 8 completed (key, lr) groups, reduction factor 3: the top ceil(8 / 3) = 3 would be promoted.
    # lonely@0.003 (stopped seed 2) is the best group: not confirmed; bad@0.003 is last: confirmed;
    # ghost has no completed run: not checkable.
    assert asha_confirmation(trials, 3) == {"stopped": 3, "checkable": 2, "confirmed": 1, "fraction": 0.5}
    # With reduction factor 1 every group is "promoted": no stop is confirmed.
    assert asha_confirmation(trials, 1)["confirmed"] == 0


def test_each_budget_pairs_with_its_own_baseline_and_ambiguity_is_refused(tmp_path):
    root = str(tmp_path)
    for budget, scale in ((1_000_000, 1.0), (4_000_000, 0.9)):
        for seed in SEEDS:
            for key, variant, loss in ((f"base{budget}", "baseline", 3.0), (f"cand{budget}", "wide", 2.9)):
                write_trial(root, "ladder", {**_row(key, 0.003, seed, "completed", scale * loss + 0.01 * seed),
                                             "variant": variant, "params_non_embedding": budget}, [])
    compared = compare(load_trials(root, ["ladder"])).set_index("key")
    assert compared.loc["cand1000000", "baseline_key"] == "base1000000"
    assert compared.loc["cand4000000", "baseline_key"] == "base4000000"
    assert compared.loc["cand4000000", "delta_vs_baseline"] == pytest.approx(0.9 * 2.9 - 0.9 * 3.0)

    write_trial(root, "ladder", {**_row("twin", 0.003, 0, "completed", 3.1), "variant": "baseline",
                                 "params_non_embedding": 1_010_000}, [])
    with pytest.raises(UserError, match="do not fall one per parameter budget"):
        compare(load_trials(root, ["ladder"]))


def _status(root: str, *args: str, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = shapesweep(["status", "s", "--root", root, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_status_json_is_one_object_with_typed_candidates(root, capsys):
    code, out, _ = _status(root, "--format", "json", capsys=capsys)
    assert code == 0
    document = json.loads(out)
    assert {"sweep", "candidates", "rank_fidelity", "choice_seeds", "measure_seeds"} <= set(document)
    assert document["sweep"] == "s" and document["choice_seeds"] == [] and document["measure_seeds"] == [0, 1, 2, 3]
    assert document["selection_bias"] and any("selection bias" in w for w in document["warnings"])
    candidates = {c["key"]: c for c in document["candidates"]}
    assert set(candidates) == {*CANDIDATES, "ghost"}  # ghost: one stopped trial, no result
    for key, c in candidates.items():
        if key in ("lonely", "ghost"):
            continue
        assert c["family"] == CANDIDATES[key][1] and c["variant"] == CANDIDATES[key][0]
        assert c["d_model"] == CANDIDATES[key][2] and isinstance(c["n_layers"], int)
        assert (c["params_total"], c["params_active"]) == (1_200_000, 900_000)  # MoE pairs differ here
        assert c["tuned"] == {"lr": CANDIDATES[key][4]} and c["tuned_edge"] == ["lr"]  # a 2-value grid
        assert isinstance(c["n_seeds"], int) and isinstance(c["val_loss_mean"], float)
        assert c["val_loss_std"] is None or isinstance(c["val_loss_std"], float)
        assert c["verdict"] in ("better", "worse", "within noise") and c["state"] == "measured"
        assert c["why"] is None and c["to_run"] is None
        for name in ("delta_vs_baseline", "ci_low", "ci_high", "seeds_for_80pct_power"):
            assert name in c
    mean, low, high = _t_interval(_paired("good"))
    good = candidates["good"]
    assert (good["delta_vs_baseline"], good["ci_low"], good["ci_high"]) == (
        pytest.approx(mean), pytest.approx(low), pytest.approx(high))
    assert good["verdict"] == "better" and good["seeds_for_80pct_power"] is None
    assert isinstance(candidates["noisy"]["seeds_for_80pct_power"], int)
    lonely = candidates["lonely"]
    assert lonely["ci_low"] is None and lonely["verdict"] is None and lonely["val_loss_mean"] is None
    assert lonely["state"] == "stopped" and lonely["no_verdict"] == "stopped"
    assert lonely["why"].startswith("stopped by ASHA") and "--scheduler fifo" in lonely["to_run"]
    assert [p["tokens"] for p in document["rank_fidelity"]] == list(TOKENS)
    for point in document["rank_fidelity"]:
        assert isinstance(point["kendall_tau"], float)
        assert {"resolved_pairs", "swapped_resolved_pairs", "unresolved_pairs"} <= set(point)
    assert document["asha"] == {"stopped": 3, "checkable": 2, "confirmed": 1, "fraction": 0.5}


def test_status_csv_has_one_flat_row_per_candidate(root, capsys):
    code, out, _ = _status(root, "--format", "csv", capsys=capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert sorted(r["key"] for r in rows) == sorted([*CANDIDATES, "ghost"])
    by_key = {r["key"]: r for r in rows}
    assert float(by_key["bad"]["tuned.lr"]) == 0.001 and by_key["bad"]["verdict"] == "worse"
    assert float(by_key["good"]["val_loss_mean"]) == pytest.approx(2.90)
    assert by_key["good"]["seeds"] == "0 1 2" and by_key["good"]["missing_seeds"] == "3"
    assert by_key["lonely"]["ci_low"] == "" and by_key["lonely"]["state"] == "stopped"


def test_status_table_shows_mean_std_the_interval_and_why_none(root, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = _status(root, capsys=capsys)
    assert code == 0
    line = next(li for li in out.splitlines() if "│ good" in li)
    mean, low, high = _t_interval(_paired("good"))
    assert "2.9000 ± 0.0300 (3)" in line and f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]" in line
    assert "better" in line and "lr=0.003 (edge)" in line
    noisy = compare(load_trials(root, ["s"])).set_index("key").loc["noisy", "seeds_for_80pct_power"]
    assert re.search(rf"within noise +│ {noisy} +│", next(li for li in out.splitlines() if "│ noisy" in li))
    assert "stopped" in next(li for li in out.splitlines() if "│ lonely" in li)
    assert "warning: its tuned values were chosen on the seeds that measure them" in out
    why = next(li for li in out.splitlines() if "(lonely): " in li)
    assert f"stopped by ASHA: no mean from the seeds that survived; run: shapesweep run {root}/s/space.yaml --scheduler fifo" in why
    assert "rank fidelity (Kendall's tau over the" in out and "ASHA stopped 3 trials" in out


def test_the_report_table_warns_of_selection_bias_and_gives_the_seeds_for_power(root, trials):
    from shapesweep.dashboards.report import build_payload

    (table,) = json.loads(build_payload(root, ["s"]))["comparisons"]
    assert any("carry selection bias" in w for w in table["warnings"])  # chosen on the measuring seeds
    power = table["columns"].index("seeds for 80% power")
    noisy = compare(trials).set_index("key").loc["noisy", "seeds_for_80pct_power"]
    assert [row[power] for row in table["rows"]].count(str(noisy)) == 1


def test_status_bad_format_and_unknown_baseline_exit_2_with_one_line(root, capsys):
    for args, words in ((("--format", "xml"), "--format: 'xml' is not one of table, json, csv"),
                        (("--baseline", "nope"), "--baseline: sweep 's' has no variant 'nope'"),
                        (("--metric", "loss"), "--metric: 'loss' is not one of")):
        code, out, err = _status(root, *args, capsys=capsys)
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [err.strip()] and words in err


def test_status_refuses_several_baselines_in_one_budget(root, capsys):
    code, out, err = _status(root, "--baseline", "hourglass", capsys=capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [err.strip()] and "do not fall one per parameter budget" in err


def test_status_without_a_baseline_variant_has_no_deltas(tmp_path, capsys):
    root = str(tmp_path)
    for seed in SEEDS:
        write_trial(root, "plain", {**_row("good", 0.003, seed, "completed", 2.9 + seed / 100),
                                    "variant": None}, [])
    capsys.readouterr()
    assert shapesweep(["status", "plain", "--root", root, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    (candidate,) = document["candidates"]
    assert document["baseline"] is None and document["rank_fidelity"] == []
    assert candidate["delta_vs_baseline"] is None and candidate["verdict"] is None
    assert candidate["val_loss_std"] == pytest.approx(0.01)


def _eval_store(root: str) -> dict[str, tuple]:
    """Baseline and two better candidates, each trial with its evaluation's standard error:
    `near` beats the baseline by less than the evaluation could, `far` by more."""
    runs = {  # key -> (variant, val_loss per seed, val_loss_se per seed, budget_error)
        "base": ("baseline", (3.000, 3.020, 2.980), (0.004, 0.005, 0.006), 0.0),
        "near": ("hourglass", (2.986, 3.004, 2.965), (0.008, 0.007, 0.009), 0.0),
        "far": ("hourglass", (2.900, 2.921, 2.879), (0.008, 0.007, 0.009), 0.02),
    }
    for key, (variant, losses, errors, budget_error) in runs.items():
        for seed, loss, error in zip(SEEDS, losses, errors, strict=True):
            write_trial(root, "e", _row(key, 0.003, seed, "completed", loss, variant=variant,
                                        val_loss_se=error, budget_error=budget_error,
                                        train_loss_tail=loss + 0.05), [])
    return runs


def test_a_verdict_the_evaluation_alone_could_make_is_flagged(tmp_path, capsys, monkeypatch):
    """eval_se: over the paired seeds, the mean of sqrt(se_c^2 + se_b^2); a better/worse within
    1.96 x that of zero is flagged (starred in the table, with its footnote)."""
    root = str(tmp_path)
    runs = _eval_store(root)
    compared = compare(load_trials(root, ["e"])).set_index("key")
    base_errors = runs["base"][2]
    for key, flagged in (("near", True), ("far", False)):
        errors = runs[key][2]
        expected = sum(math.hypot(a, b) for a, b in zip(errors, base_errors, strict=True)) / 3
        row = compared.loc[key]
        assert row["verdict"] == "better"  # the seeds agree ...
        assert row["eval_se"] == pytest.approx(expected)
        assert row["eval_noise"] is flagged  # ... but near's 0.015 is within 1.96 x 0.0096
    assert compare(load_trials(root, ["e"]), "psnr")["eval_se"].isna().all()  # val_loss only
    capsys.readouterr()
    assert shapesweep(["status", "e", "--root", root, "--format", "json"]) == 0
    candidates = {c["key"]: c for c in json.loads(capsys.readouterr().out)["candidates"]}
    assert candidates["near"]["eval_noise"] is True and candidates["far"]["eval_noise"] is False
    assert candidates["far"]["budget_error"] == pytest.approx(0.02)
    monkeypatch.setenv("COLUMNS", "300")
    assert shapesweep(["status", "e", "--root", root]) == 0
    out = capsys.readouterr().out
    assert "better*" in next(li for li in out.splitlines() if "│ near" in li)
    assert "better*" not in next(li for li in out.splitlines() if "│ far" in li)
    assert "* within 1.96 x eval_se of zero" in out
    assert "budget err" in out and "+2.0%" in next(li for li in out.splitlines() if "│ far" in li)


def test_status_compares_xformers_reported_loss(tmp_path, capsys):
    """`status --metric train_loss_tail`: the training loss over the last steps, compared as
    any final metric."""
    root = str(tmp_path)
    _eval_store(root)
    capsys.readouterr()
    assert shapesweep(["status", "e", "--root", root, "--format", "json",
                       "--metric", "train_loss_tail"]) == 0
    document = json.loads(capsys.readouterr().out)
    candidates = {c["key"]: c for c in document["candidates"]}
    assert document["metric"] == "train_loss_tail"
    assert candidates["base"]["train_loss_tail_mean"] == pytest.approx(3.05)
    assert candidates["far"]["verdict"] == "better" and candidates["far"]["eval_se"] is None
