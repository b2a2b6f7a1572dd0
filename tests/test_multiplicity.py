"""Family-wise control of a sweep's comparisons (results/multiplicity.py, `status --adjust`,
the report): Holm and Benjamini-Hochberg against hand-worked textbook values, the adjusted
intervals against their definitions, `status`'s JSON fields recomputed by hand from the
stored seeds, and the refusals (one line, exit 2).

Trials are written through the real results store (tests/test_stats.py's sweep).
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from test_stats import _paired, _row, _status
from test_stats import root as root  # noqa: F401  (the fixture: tests/test_stats.py's sweep)

from shapesweep.common import UserError
from shapesweep.results.multiplicity import (
    ADJUST_METHODS,
    adjusted_p,
    check_method,
    interval_confidence,
    paired_p,
)
from shapesweep.results.stats import compare, paired_rows
from shapesweep.results.store import load_trials, write_trial
from shapesweep.sweep.cli.main import main as shapesweep


def test_holm_matches_a_hand_worked_step_down():
    """Holm (1979)'s procedure on four p-values: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1
    = 0.02, 0.03, 0.06, 0.04; each adjusted value is at least the one before (0.04 -> 0.06)."""
    p = np.array([0.01, 0.04, 0.03, 0.005])
    assert adjusted_p(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjusted_p(np.array([0.5, 0.6]), "holm") == pytest.approx([1.0, 1.0])  # capped at 1
    assert adjusted_p(p, "none") == pytest.approx(p)


def test_bh_matches_a_hand_worked_step_up():
    """Benjamini-Hochberg on the same four: sorted p times m / rank = 0.02, 0.02, 0.04, 0.04,
    each the smallest of those at its rank and above."""
    p = np.array([0.01, 0.04, 0.03, 0.005])
    assert adjusted_p(p, "bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])
    # Benjamini & Hochberg (1995)'s own example: 15 p-values, 4 rejected at q = 0.05.
    paper = np.array([0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240,
                      0.4262, 0.5719, 0.6528, 0.7590, 1.000])
    assert (adjusted_p(paper, "bh") <= 0.05).sum() == 4
    assert (adjusted_p(paper, "holm") <= 0.05).sum() == 3  # Holm rejects 3 there (0.0095 * 12 > 0.05)


def test_missing_p_values_are_not_in_the_family():
    p = np.array([0.01, np.nan, 0.02])
    holm = adjusted_p(p, "holm")
    assert math.isnan(holm[1]) and holm[[0, 2]] == pytest.approx([0.02, 0.02])  # m = 2, not 3
    assert interval_confidence(p, "holm") == pytest.approx(1 - 0.05 / 2)
    assert interval_confidence(np.array([np.nan]), "holm") == pytest.approx(0.95)


def test_adjusted_intervals_agree_with_the_adjusted_verdicts():
    """BH's false-coverage-rate interval (1 - R alpha / m) excludes zero exactly where BH
    resolves; Bonferroni's (Holm's interval) excludes zero only where Holm resolves (Holm may
    resolve more). Random families of paired differences, 3 seeds each."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        m = int(rng.integers(2, 12))
        diff = rng.normal(rng.normal(0, 0.05, (m, 1)), 0.03, (m, 3))
        n, mean, sd, _, _ = paired_rows(diff)
        p = paired_p(n, mean, sd)
        for method in ("holm", "bh"):
            _, _, _, low, high = paired_rows(diff, interval_confidence(p, method))
            excludes, resolved = (low > 0) | (high < 0), adjusted_p(p, method) <= 0.05
            if method == "bh":
                assert (excludes == resolved).all()
            else:
                assert (resolved | ~excludes).all()


def test_paired_p_is_scipys_paired_t_test():
    a, b = np.array([3.00, 3.02, 2.98, 3.05]), np.array([2.95, 3.10, 2.97, 2.99])
    n, mean, sd, _, _ = paired_rows((a - b)[None, :])
    assert paired_p(n, mean, sd)[0] == pytest.approx(sps.ttest_rel(a, b).pvalue)
    assert paired_p([3, 3, 1], [0.1, 0.0, 0.1], [0.0, 0.0, np.nan]).tolist()[:2] == [0.0, 1.0]
    assert math.isnan(paired_p([1], [0.1], [np.nan])[0])


def _p(key: str) -> float:
    d = np.array(_paired(key))
    return float(2 * sps.t.sf(abs(d.mean()) / (d.std(ddof=1) / math.sqrt(len(d))), len(d) - 1))


def test_status_json_carries_the_adjusted_p_interval_and_verdict(root, capsys):  # noqa: F811
    """The family: good, bad and noisy against base (lonely was stopped: no p). Holm by hand."""
    code, out, _ = _status(root, "--format", "json", capsys=capsys)
    assert code == 0
    document = json.loads(out)
    candidates = {c["key"]: c for c in document["candidates"]}
    p = {key: _p(key) for key in ("good", "bad", "noisy")}
    order = sorted(p, key=p.get)
    holm, running = {}, 0.0
    for rank, key in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * p[key]))
        holm[key] = running
    assert document["adjustment"] == {
        "method": "holm", "family": "each candidate vs its baseline", "family_size": 3, "alpha": 0.05,
        "interval": document["adjustment"]["interval"], "interval_confidence": pytest.approx(1 - 0.05 / 3),
        "resolved_raw": 2, "resolved_adjusted": 2}
    critical = sps.t.ppf(1 - 0.05 / 6, 2)  # two-sided at 0.05 / 3
    for key in ("good", "bad", "noisy"):
        c, d = candidates[key], np.array(_paired(key))
        assert c["p_value"] == pytest.approx(p[key]) and c["p_adjusted"] == pytest.approx(holm[key])
        half = critical * d.std(ddof=1) / math.sqrt(3)
        assert c["ci_low_adjusted"] == pytest.approx(d.mean() - half)
        assert c["ci_high_adjusted"] == pytest.approx(d.mean() + half)
        assert c["verdict_raw"] == c["verdict"]  # here every raw verdict survives
    assert candidates["lonely"]["p_value"] is None and candidates["base"]["p_value"] is None
    pairs = document["exploratory_pairs"]
    assert pairs["adjust"] == "holm" and pairs["family_size"] == 6  # base, good, bad, noisy
    assert pairs["resolved_raw"] == len(pairs["pairs"]) and pairs["resolved_adjusted"] <= pairs["resolved_raw"]
    first = pairs["pairs"][0]
    assert first["p_adjusted"] == pytest.approx(min(1.0, 6 * first["p_value"]))  # the smallest: times 6
    assert all(x["delta"] < 0 for x in pairs["pairs"])  # oriented: the better one first (a loss)


def test_a_verdict_that_does_not_survive_the_adjustment_says_within_noise(tmp_path):
    """Four candidates, one with p just under 5% on its own: Holm over four takes it back;
    `none` keeps it; the power column then asks for seeds at 0.05 / 4."""
    root = str(tmp_path)
    losses = {"base": (3.00, 3.10, 3.05), "edge": (2.95, 3.03, 3.01),
              "flat1": (3.01, 3.09, 3.06), "flat2": (2.99, 3.12, 3.04), "flat3": (3.02, 3.08, 3.05)}
    for key, finals in losses.items():
        for seed, loss in enumerate(finals):
            write_trial(root, "four", {**_row(key, 0.003, seed, "completed", loss),
                                       "variant": "baseline" if key == "base" else "wide"}, [])
    trials = load_trials(root, ["four"])
    d = np.array(losses["edge"]) - np.array(losses["base"])
    raw_p = 2 * sps.t.sf(abs(d.mean()) / (d.std(ddof=1) / math.sqrt(3)), 2)
    assert 0.0125 < raw_p < 0.05  # resolved alone, not among four
    holm = compare(trials).set_index("key").loc["edge"]
    raw = compare(trials, adjust="none").set_index("key").loc["edge"]
    assert raw["verdict"] == "better" and holm["verdict_raw"] == "better"
    assert holm["verdict"] == "within noise" and holm["p_adjusted"] > 0.05
    assert holm["seeds_for_80pct_power"] > 3 and raw["seeds_for_80pct_power"] is None
    assert check_method("bh") == "bh"


def test_bad_adjust_and_a_family_of_one_exit_2_with_one_line(root, tmp_path, capsys):  # noqa: F811
    for args, words in ((("--adjust", "bonferroni"), "--adjust: 'bonferroni' is not one of holm, bh, none"),):
        code, out, err = _status(root, *args, capsys=capsys)
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [err.strip()] and words in err
    capsys.readouterr()
    assert shapesweep(["status", "--root", root, "--adjust", "holm"]) == 2  # no NAME: no family
    assert "--adjust: needs one sweep NAME" in capsys.readouterr().err
    pair = str(tmp_path / "pair")
    for seed in range(3):
        for key, variant, loss in (("b", "baseline", 3.0), ("c", "wide", 2.9)):
            write_trial(pair, "pair", {**_row(key, 0.003, seed, "completed", loss + seed / 100),
                                       "variant": variant}, [])
    for method in ("holm", "bh"):
        capsys.readouterr()
        assert shapesweep(["status", "pair", "--root", pair, "--adjust", method]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert "sweep 'pair' compares 1 candidate with its baseline: a family of 1 has nothing to adjust" in captured.err
    capsys.readouterr()
    assert shapesweep(["status", "pair", "--root", pair, "--format", "json"]) == 0  # the default: no refusal
    assert shapesweep(["status", "pair", "--root", pair, "--adjust", "none", "--format", "json"]) == 0
    capsys.readouterr()
    assert shapesweep(["dashboard", "pair", "--root", pair, "--adjust", "sidak", "--out",
                       str(tmp_path / "r.html")]) == 2
    captured = capsys.readouterr()
    assert "--adjust: 'sidak' is not one of" in captured.err and not (tmp_path / "r.html").exists()


def test_status_table_and_report_show_raw_and_adjusted_side_by_side(root, capsys, monkeypatch):  # noqa: F811
    from shapesweep.dashboards.report import build_payload

    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = _status(root, "--adjust", "bh", capsys=capsys)
    assert code == 0 and "p → bh-adjusted p [" in out
    assert re.search(r"verdicts: Benjamini-Hochberg \(false discovery rate 5%\) over the 3 comparisons", out)
    assert "exploratory, all 6 pairs (bh over all 6)" in out
    (table,) = json.loads(build_payload(root, ["s"], adjust="bh"))["comparisons"]
    column = next(i for i, c in enumerate(table["columns"]) if c.startswith("p → bh-adjusted p"))
    good = next(r for r in table["rows"] if r[table["columns"].index("Δ vs baseline [95% CI]")].startswith("-0.1000"))
    assert good[column].startswith(f"p {_p('good'):.2g} → ")
    assert any(n.startswith("verdicts: Benjamini-Hochberg") for n in table["notes"])


def test_the_adjust_help_names_every_method():
    from shapesweep.sweep.cli.main import build_parser

    status = build_parser()._subparsers._group_actions[0].choices["status"]
    text = status.format_help()
    assert all(method in text for method in ADJUST_METHODS)


def test_unknown_method_is_refused_in_python_too():
    with pytest.raises(UserError, match="'fdr' is not one of holm, bh, none"):
        compare(pd.DataFrame(), adjust="fdr")


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start)
    return text[start:end if end > 0 else None]


def _number(text: str) -> float:
    return float(text.replace("−", "-").replace("+", ""))


def test_the_worked_example_in_statistics_md_is_recomputed_from_its_per_seed_table():
    """docs/statistics.md's Holm example: every number of its comparison table, and the BH
    sentence after it, from the per-seed losses it prints (rounded as printed)."""
    from pathlib import Path

    text = _section((Path(__file__).resolve().parents[1] / "docs/statistics.md").read_text(),
                    "### Worked example")
    tables = [[[c.strip() for c in line.strip().strip("|").split("|")] for line in block.splitlines()[2:]]
              for block in re.findall(r"((?:^\|.*\n)+)", text, re.M)]
    seeds = {row[0].split(" (")[0]: np.array([_number(v) for v in row[1].split(" / ")]) for row in tables[0]}
    rows = tables[1]
    diff = np.array([seeds[row[0]] - seeds["baseline"] for row in rows])
    n, mean, sd, low, high = paired_rows(diff)
    p = paired_p(n, mean, sd)
    holm = adjusted_p(p, "holm")
    level = interval_confidence(p, "holm")
    _, _, _, low_adj, high_adj = paired_rows(diff, level)
    assert f"Bonferroni {level:.2%} CI" in text and f"m = {len(rows)}" in text
    for k, row in enumerate(rows):
        assert [_number(v) for v in row[1].split(" / ")] == pytest.approx(diff[k], abs=1e-9)
        assert _number(row[2]) == pytest.approx(mean[k], abs=5e-5) and _number(row[3]) == pytest.approx(sd[k], abs=5e-5)
        assert row[4] == f"[{low[k]:+.4f}, {high[k]:+.4f}]".replace("-", "−")
        assert _number(row[5]) == pytest.approx(p[k], abs=5e-5) and _number(row[7]) == pytest.approx(holm[k], abs=5e-5)
        assert row[8] == f"[{low_adj[k]:+.4f}, {high_adj[k]:+.4f}]".replace("-", "−")
        raw_word = "within noise" if low[k] < 0 < high[k] else "worse" if mean[k] > 0 else "better"
        word = "within noise" if holm[k] > 0.05 else "worse" if mean[k] > 0 else "better"
        assert row[9] == f"{raw_word} → {word}"
    assert f"t(0.975, 2) = {sps.t.ppf(0.975, 2):.3f}" in text and f"t(1 − 0.05/6, 2) = {sps.t.ppf(1 - 0.05 / 6, 2):.3f}" in text
    # the BH sentence: adjusted p, R, the level and the two intervals
    bh = adjusted_p(p, "bh")
    bh_level = interval_confidence(p, "bh")
    _, _, _, bh_low, bh_high = paired_rows(diff, bh_level)
    resolved = bh <= 0.05
    assert f"both adjusted p are {bh[resolved][0]:.4f}" in text and np.allclose(bh[resolved], bh[resolved][0])
    assert f"R = {resolved.sum()}" in text and f"= {bh_level:.2%}" in text
    for k, row in enumerate(rows):
        if resolved[k]:
            assert f"{row[0]} [{bh_low[k]:+.4f}, {bh_high[k]:+.4f}]".replace("-", "−") in text.replace("\n", " ")
    # the all-pairs family: 6 pairs, resolved raw and after Holm
    names = list(seeds)
    pairs = np.array([seeds[a] - seeds[b] for i, a in enumerate(names) for b in names[i + 1:]])
    pn, pmean, psd, plow, phigh = paired_rows(pairs)
    raw = int(((plow > 0) | (phigh < 0)).sum())
    kept = int((adjusted_p(paired_p(pn, pmean, psd), "holm") <= 0.05).sum())
    words = {0: "none", 1: "one", 2: "two", 3: "three", 4: "4"}
    assert f"({len(pairs)} pairs) resolves {raw} at raw 95% and {words[kept]} after Holm" in " ".join(text.split())
