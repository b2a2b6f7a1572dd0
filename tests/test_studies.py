"""`shapesweep study run|report`: a pre-registered study run into its own store (real Ray,
real training of demo-quick's shapes at a tiny budget), reported from it identically twice;
a store missing trials lists them and decides nothing; every bad study.yaml is one line,
exit 2, before any work; and the committed studies parse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from sweep_helpers import raw_trial_rows

from shapesweep.results.multiplicity import adjusted_p, paired_p
from shapesweep.results.rows import TrialRecord
from shapesweep.results.stats import paired_rows
from shapesweep.results.store import write_sweep_file
from shapesweep.results.study_agreement import adaptive_verdict, agreement_of, fixed_verdict
from shapesweep.results.study_lr import is_lr_fit, read_lr_study
from shapesweep.results.study_report import SweepData, pair_results
from shapesweep.results.study_spec import Pair, candidate_labels, read_study, study_names
from shapesweep.search_spaces.solver import candidate_document, plan
from shapesweep.search_spaces.space import load_space, parse_space, tuned_json
from shapesweep.sweep.cli.main import main as shapesweep

REPO_STUDIES = Path(__file__).parents[1] / "studies"
# demo-quick's baseline, deep and wide shapes, untuned, 10 steps of 256 tokens: 9 short trials
TINY_SPACE = {key: value for key, value in yaml.safe_load(load_space("demo-quick").source_text).items()
              if key != "tune"} | {"name": "demo-tiny"}
TINY_SPACE["variants"] = [v for v in TINY_SPACE["variants"] if v["name"] != "hourglass"]
TINY_SPACE["train"] = {"steps": 10, "seq_len": 32, "batch_tokens": 256, "lr": 3.0e-3, "init": "mup",
                       "mup_base_width": 64, "eval_tokens": 512, "eval_every": 10}
STUDY = {
    "question": "Is the wide shape ahead of the baseline at a tiny budget?",
    "sweeps": [{"name": "tiny", "space": "demo-tiny.yaml"}],
    "seeds": [0, 1, 2],
    "comparisons": [{"sweep": "tiny", "of": ["deep", "wide"], "vs": "baseline"}],
    "decide": {"quantity": "delta_val_loss", "of": "wide", "vs": "baseline", "rule": "upper < 0",
               "holds": "The wide shape is ahead.", "fails": "No advantage shown."},
}


def write_study(studies: Path, name: str = "tiny", **changes) -> Path:
    folder = studies / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "demo-tiny.yaml").write_text(yaml.safe_dump(TINY_SPACE, sort_keys=False))
    (folder / "study.yaml").write_text(yaml.safe_dump({**STUDY, **changes}, sort_keys=False))
    return folder


def study(studies: Path, *argv: str) -> int:
    return shapesweep(["study", *argv, "--studies", str(studies)])


@pytest.mark.slow  # a real sweep of 9 trials (the reports below read stores written directly)
def test_run_then_report(tmp_path, local_ray, one_torch_thread, capsys):
    folder = write_study(tmp_path)
    assert study(tmp_path, "run", "tiny", "--no-progress") == 0
    rows = raw_trial_rows(folder / "store", "tiny")
    assert len(rows) == 9 and set(rows["status"]) == {"completed"}
    assert set(rows["seed"]) == {0, 1, 2}
    assert study(tmp_path, "run", "tiny", "--no-progress") == 0  # resumed: nothing left to run
    assert len(raw_trial_rows(folder / "store", "tiny")) == 9
    capsys.readouterr()
    assert study(tmp_path, "report", "tiny") == 0
    assert "decision stated" in capsys.readouterr().out
    first = (folder / "report.md").read_text()
    assert study(tmp_path, "report", "tiny") == 0
    assert (folder / "report.md").read_text() == first  # from the store alone, byte for byte
    assert "Complete: every planned candidate" in first
    assert "| tiny/wide vs baseline | 3 |" in first and "| tiny/deep vs baseline | 3 |" in first
    assert "Family `main`: 2 comparisons with a p-value, Holm-adjusted; intervals Bonferroni at 97.50%" in first
    decision = first.split("## Decision")[1]
    assert "-> **holds**. The wide shape is ahead." in decision or "-> **does not hold**. No advantage" in decision
    assert str(tmp_path) not in first  # no path of this machine
    write_study(tmp_path, seeds=[0, 1, 2, 3])
    capsys.readouterr()
    assert study(tmp_path, "run", "tiny") == 2  # fixed before it ran: no seed added afterwards
    assert "study.yaml: changed since sweep 'tiny' of the study ran" in capsys.readouterr().err
    cpu = rows["cpu_model"].iloc[0]
    assert f"| {cpu} |" in first and "| 9 |" in first


def land(root: Path, space_doc: dict, variant: str, seed: int, loss: float) -> None:
    """One completed trial of `variant` in sweep `tiny` of the store at `root`, as `run` writes it."""
    text = yaml.safe_dump(space_doc, sort_keys=False)
    space = parse_space(space_doc, text, "space.yaml")
    candidate = next(c for c in plan(space).candidates if c.variant == variant)
    document = candidate_document(candidate, space.train_for({}, seed, candidate))
    TrialRecord(sweep="tiny", trial_id=f"{variant}-s{seed}", key=candidate.key, seed=seed, status="completed",
                candidate=candidate.to_row(), document=document, budget_tokens=2560,
                metrics={"val_loss": loss, "tokens": 2560, "steps": 10}, curve=[],
                tuned_json=tuned_json({})).write(str(root))


def test_incomplete_store_lists_missing_and_decides_nothing(tmp_path, capsys):
    folder = write_study(tmp_path)
    root = folder / "store"
    write_sweep_file(str(root), "tiny", "space.yaml", yaml.safe_dump(TINY_SPACE, sort_keys=False))
    write_sweep_file(str(root), "tiny", "sweep.json", json.dumps({"seeds": [0, 1, 2], "search": "grid",
                                                                  "scheduler": "fifo"}))
    for seed in (0, 1, 2):
        land(root, TINY_SPACE, "baseline", seed, 5.0 + 0.01 * seed)
    land(root, TINY_SPACE, "wide", 0, 4.9)
    assert study(tmp_path, "report", "tiny") == 0
    assert "no decision" in capsys.readouterr().out
    report = (folder / "report.md").read_text()
    assert "**Incomplete: no decision.** Missing trials:" in report
    assert "- tiny/wide: seeds 1, 2 (measured)" in report
    assert "- tiny/deep: seeds 0, 1, 2 (pending)" in report
    assert "tiny/baseline: seeds" not in report
    assert "**no decision** (data incomplete)" in report
    assert "holds" not in report.split("## Decision")[1]


def test_trials_of_another_machine_decide_nothing(tmp_path, capsys):
    folder = write_study(tmp_path, machine={"cpu_model": "Some CPU"})
    root = folder / "store"
    write_sweep_file(str(root), "tiny", "space.yaml", yaml.safe_dump(TINY_SPACE, sort_keys=False))
    for variant in ("baseline", "deep", "wide"):
        for seed in (0, 1, 2):
            offset = {"baseline": 0.0, "deep": 0.02 * (seed % 2), "wide": 0.1}[variant]
            land(root, TINY_SPACE, variant, seed, 5.0 + 0.01 * seed + offset)
    assert study(tmp_path, "report", "tiny") == 0
    report = (folder / "report.md").read_text()
    assert "**No decision:**" in report and "- tiny: 9 trials ran on cpu_model 'unrecorded'" in report
    assert "Required: cpu_model 'Some CPU'." in report
    assert "**no decision** (data incomplete)" in report
    assert "| tiny/wide vs baseline | 3 | +0.1000 |" in report


BAD = {
    "unknown-space": ({"sweeps": [{"name": "tiny", "space": "demo-quik"}]},
                      "sweeps.0.space: 'demo-quik' is not a built-in space (did you mean 'demo-quick'?"),
    "missing-space-file": ({"sweeps": [{"name": "tiny", "space": "other.yaml"}]},
                           "sweeps.0.space: 'other.yaml': no such space file"),
    "seed-twice": ({"seeds": [0, 1, 1]}, "seeds: "),
    "negative-seed": ({"seeds": [0, -1]}, "seeds: "),
    "no-seeds": ({"seeds": []}, "seeds: "),
    "seed-text": ({"seeds": "0,1,2"}, "seeds: "),
    "unknown-variant": ({"comparisons": [{"sweep": "tiny", "of": ["deep", "wdie"], "vs": "baseline"}]},
                        "comparisons.0.of: sweep 'tiny' plans no variant 'wdie' (did you mean 'wide'?"),
    "unknown-baseline": ({"comparisons": [{"sweep": "tiny", "of": "deep", "vs": "base"}]},
                         "comparisons.0.vs: sweep 'tiny' plans no variant 'base'"),
    "unknown-sweep": ({"comparisons": [{"sweep": "tinny", "of": "deep"}]},
                      "comparisons.0.sweep: no sweep 'tinny' in the study (did you mean 'tiny'?"),
    "unknown-quantity": ({"decide": {"quantity": "delta_val_ppl", "of": "wide", "rule": "upper < 0"}},
                         "decide.quantity: 'delta_val_ppl' is not a quantity the report computes"),
    "bad-rule": ({"decide": {"quantity": "delta_val_loss", "of": "wide", "rule": "width < 0"}},
                 "decide.rule: 'width < 0' is not FIELD OP NUMBER"),
    "rule-not-compared": ({"decide": {"quantity": "delta_val_loss", "of": "baseline", "rule": "upper < 0"}},
                          "decide.of: 'baseline' vs 'baseline' names no comparison the study makes"),
    "other-machine": ({"machine": {"cpu_model": "Not This CPU 9000"}},
                      "machine.cpu_model: the study must run on cpu_model 'Not This CPU 9000'; this machine has"),
    "unknown-key": ({"seed": [0]}, "seed: unknown key 'seed' (did you mean 'seeds'?"),
    "adaptive-min": ({"sweeps": [{"name": "tiny", "space": "demo-tiny.yaml", "seeds": {"min": 1, "max": 3}}]},
                     "sweeps.0.seeds: seeds min must be at least 2"),
    "adaptive-outside": ({"sweeps": [{"name": "tiny", "space": "demo-tiny.yaml", "seeds": {"min": 2, "max": 4}}]},
                         "sweeps.0.seeds: seed 3 of the range is not one of the study's seeds"),
    "agreement-unknown": ({"agreement": {"fixed": "tiny", "adaptive": "other"}},
                          "agreement.adaptive: no sweep 'other' in the study"),
    "agreement-not-adaptive": ({"agreement": {"fixed": "tiny", "adaptive": "tiny"}},
                               "agreement: the fixed sweep needs the study's seeds and the adaptive one a range"),
    "unknown-nested-key": ({"decide": {"quantity": "delta_val_loss", "of": "wide", "rule": "upper < 0",
                                       "hold": "x"}},
                           "decide.hold: unknown key 'hold' (did you mean 'holds'?"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_study_is_one_line_before_any_work(tmp_path, capsys, case):
    changes, expected = BAD[case]
    folder = write_study(tmp_path, **changes)
    assert study(tmp_path, "run", "tiny") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"shapesweep study: error: {folder / 'study.yaml'}: {expected}"), err
    assert not (folder / "store").exists()  # nothing run, nothing written


def test_unknown_study_names_the_known(tmp_path, capsys):
    write_study(tmp_path)
    assert study(tmp_path, "report", "tinyy") == 2
    assert "no study 'tinyy' (did you mean 'tiny'? studies: tiny)" in capsys.readouterr().err


def test_holm_spans_sweeps_that_share_a_baseline():
    """Two sweeps compared with one baseline: one family of both, as multiplicity adjusts it."""
    seeds = [0, 1, 2]
    base = pd.Series([5.0, 5.1, 4.9], index=seeds)
    data = {"a": SweepData("a", True, [], {"baseline": base, "x": base - [0.05, 0.07, 0.06]}),
            "b": SweepData("b", True, [], {"y": base + [0.01, -0.02, 0.02]})}

    pairs = [Pair("a", "x", "a", "baseline", "main"), Pair("b", "y", "a", "baseline", "main")]
    results = pair_results(pairs, seeds, data)
    diff = np.array([[-0.05, -0.07, -0.06], [0.01, -0.02, 0.02]])
    n, mean, sd, _, _ = paired_rows(diff)
    assert [r.family_size for r in results] == [2, 2]
    assert np.allclose([r.p_adjusted for r in results], adjusted_p(paired_p(n, mean, sd), "holm"))
    _, _, _, low, high = paired_rows(diff, 1 - 0.05 / 2)
    assert np.allclose([r.lower for r in results], low) and np.allclose([r.upper for r in results], high)


def test_committed_studies_parse():
    names = study_names(REPO_STUDIES)
    assert {"hourglass-ffn-ucurve", "vformer-small", "hourglass-mlp-pareto", "ffn-variants",
            "lr-transfer"} <= set(names)
    for name in names:
        if is_lr_fit(REPO_STUDIES, name):
            assert read_lr_study(REPO_STUDIES, name).doc.fits
            continue
        found = read_study(REPO_STUDIES, name)
        assert found.pairs and found.decisions and found.seeds


def test_agreement_of_fixed_and_adaptive_verdicts():
    """Same verdict: agrees; one resolved, one open: said as such; opposite: REVERSED."""
    assert fixed_verdict(0.01, 0.05, "val_loss") == "worse" and fixed_verdict(-0.05, -0.01, "val_loss") == "better"
    assert fixed_verdict(-0.01, 0.05, "val_loss") == "open" and fixed_verdict(0.01, 0.05, "psnr") == "better"
    assert adaptive_verdict({"sequential_state": "resolved-worse"}) == "worse"
    assert adaptive_verdict({"sequential_state": "futile"}) == "open (futile)"
    assert agreement_of("worse", "worse") == "agrees" and agreement_of("better", "worse") == "REVERSED"
    assert agreement_of("worse", "open (max)") == "resolved vs open" == agreement_of("open", "better")
    assert agreement_of("open", "open (futile)") == "agrees (both open)"


def test_the_adaptive_seeds_study_runs_one_space_two_ways():
    found = read_study(REPO_STUDIES, "adaptive-seeds")
    assert found.agreement == ("fixed-6", "adaptive-2-6") and found.adaptive == {"adaptive-2-6": (2, 6)}
    assert found.run_seeds("adaptive-2-6") == "min=2,max=6" and found.run_seeds("fixed-6") == "0,1,2,3,4,5"
    assert len(plan(found.spaces["fixed-6"]).candidates) >= 7  # six candidates and the baseline


def test_a_variant_of_several_candidates_is_named_by_what_tells_them_apart(tmp_path, capsys):
    """vformer-resize-small's three bottlenecks are `bottleneck resize=...`; the bare variant
    is refused with those names; vformer-vs-constant-small's two baselines go by d_model."""
    labels = sorted(candidate_labels(load_space("vformer-resize-small")).values())
    assert labels == ["baseline", "bottleneck resize=carry", "bottleneck resize=projection",
                      "bottleneck resize=zero"]
    assert sorted(candidate_labels(load_space("vformer-vs-constant-small")).values()) == [
        "baseline d_model=64", "baseline d_model=96", "d64", "d96"]
    one = {"sweeps": [{"name": "r", "space": "vformer-resize-small"}],
           "comparisons": [{"sweep": "r", "of": "bottleneck resize=zero", "vs": "bottleneck resize=carry"}],
           "decide": {"quantity": "delta_val_loss", "of": "bottleneck resize=zero",
                      "vs": "bottleneck resize=carry", "rule": "lower > 0"}}
    write_study(tmp_path, **one)
    assert read_study(tmp_path, "tiny").pairs[0].label == "r/bottleneck resize=zero vs bottleneck resize=carry"
    folder = write_study(tmp_path, **{**one, "comparisons": [{"sweep": "r", "of": "bottleneck"}]})
    assert study(tmp_path, "run", "tiny") == 2
    assert (f"{folder / 'study.yaml'}: comparisons.0.of: variant 'bottleneck' of sweep 'r' has 3 candidates: "
            "name one ('bottleneck resize=projection', 'bottleneck resize=carry', 'bottleneck resize=zero')"
            ) in capsys.readouterr().err
