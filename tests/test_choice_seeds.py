"""Choice seeds: `tune.choice_seeds` choose each candidate's tuned value, the space's seeds
measure it, and no choosing seed enters a mean, interval or verdict; `status` says which
seeds did what and why a candidate has no verdict. Hand-made trials go through the real
results store; the sweep at the end runs on a real Ray, killed between a candidate's choice
and its measurement, and resumed."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from scipy import stats as sps
from sweep_helpers import CHILD_ENV, TINY_TRAIN, run, write_space

from shapesweep.results.roles import with_seed_roles
from shapesweep.results.stats import choose_tuned, compare
from shapesweep.results.store import load_trials, sweep_dir, write_sweep_file, write_trial
from shapesweep.results.summary import comparisons, tuned_text
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import load_space, tuned_json

CHOICE, MEASURE = 100, (0, 1, 2)
LOW, HIGH = 0.001, 0.003
# key -> (variant, {lr: choice seed's loss or a status}, chosen lr, {measure seed: loss or status})
SWEEP = {
    "base": ("baseline", {LOW: 3.5, HIGH: 3.0}, HIGH, {0: 3.00, 1: 3.02, 2: 2.98}),
    # the choice seed is very lucky at lr 1e-3: were it counted, the mean would drop by 0.2
    "lucky": ("wide", {LOW: 2.0, HIGH: 2.5}, LOW, {0: 2.95, 1: 2.97, 2: 2.93}),
    "flaky": ("deep", {LOW: 3.1, HIGH: "stopped_early"}, LOW, {0: 3.05, 1: "failed", 2: 3.01}),
    "cut": ("narrow", {LOW: 3.2, HIGH: 3.3}, LOW, {0: 3.10, 1: "stopped_early", 2: 3.12}),
    "unsure": ("tall", {LOW: 3.4}, None, {}),  # its lr 3e-3 choice trial has not ended
    "short": ("flat", {LOW: 3.6, HIGH: 3.2}, HIGH, {0: 3.15}),  # seeds 1 and 2 not run yet
    # lr 3e-3 wins on the choice seed by 0.01, a tenth of its measure seeds' sd: a close choice
    "near": ("thin", {LOW: 3.10, HIGH: 3.09}, HIGH, {0: 3.0, 1: 3.1, 2: 3.2}),
}
ERROR = "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA out of memory"


def _row(key: str, lr: float, seed: int, outcome) -> dict:
    status = outcome if isinstance(outcome, str) else "completed"
    return {"trial_id": f"{key}-{lr}-s{seed}", "key": key, "family": "conventional", "seed": seed,
            "variant": SWEEP[key][0], "tuned_json": tuned_json({"lr": lr}), "status": status,
            "val_loss": None if isinstance(outcome, str) else outcome,
            "tokens": 150 if status == "stopped_early" else 300,
            "error": ERROR if status == "failed" else None, "d_model": 64, "n_layers": 4, "d_h": 256,
            "params_non_embedding": 1_000_000, "params_total": 1_200_000}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("choice"))
    for key, (_, choices, chosen, measured) in SWEEP.items():
        for lr, outcome in choices.items():
            write_trial(root, "c", _row(key, lr, CHOICE, outcome), [])
        for seed, outcome in measured.items():
            write_trial(root, "c", _row(key, chosen, seed, outcome), [])
    # what `run` keeps in the sweep folder: the space (its tune.choice_seeds) and its options
    space = {"name": "c", "tune": {"lr": [LOW, HIGH], "choice_seeds": [CHOICE]}, "seeds": list(MEASURE)}
    write_sweep_file(root, "c", "space.yaml", yaml.safe_dump(space))
    write_sweep_file(root, "c", "sweep.json", json.dumps({"scheduler": "fifo", "seeds": None}))
    return root


@pytest.fixture(scope="module")
def compared(root):
    return compare(with_seed_roles(load_trials(root, ["c"]), root)).set_index("key")


def _interval(diffs: list[float]) -> tuple[float, float, float]:
    n, mean = len(diffs), sum(diffs) / len(diffs)
    half = sps.t.ppf(0.975, n - 1) * math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def test_the_choosing_seed_never_enters_a_mean_or_an_interval(root, compared):
    base, lucky = SWEEP["base"][3], SWEEP["lucky"][3]
    row = compared.loc["lucky"]
    assert json.loads(row["tuned"]) == {"lr": LOW}  # the value the choice seed chose
    assert row["mean"] == pytest.approx(sum(lucky.values()) / 3) and row["n"] == 3
    assert row["choice_mean"] == pytest.approx(2.0)
    mean, low, high = _interval([lucky[s] - base[s] for s in MEASURE])
    assert (row["delta_vs_baseline"], row["ci_low"], row["ci_high"]) == (
        pytest.approx(mean), pytest.approx(low), pytest.approx(high))
    assert row["n_paired"] == 3 and row["verdict"] == "better"
    # The same rows read as if every seed measured: the choosing seed would change the numbers
    # (so the test above would fail if the roles were ignored).
    leaky = compare(load_trials(root, ["c"])).set_index("key").loc["lucky"]
    assert leaky["mean"] != pytest.approx(row["mean"])


def test_the_choice_is_the_best_value_on_the_choosing_seed_alone(root):
    trials = with_seed_roles(load_trials(root, ["c"]), root)
    picked = choose_tuned(trials[trials["chooses"]]).droplevel("sweep")
    for key, (_, _, chosen, _) in SWEEP.items():
        if key != "unsure":  # unsure's only completed value is picked, yet its choice is open
            assert picked[key] == tuned_json({"lr": chosen}), key


def test_a_choice_within_the_seed_noise_is_flagged_close(root, compared):
    margins = compared["choice_margin"]
    assert margins["base"] == pytest.approx(0.5) and margins["lucky"] == pytest.approx(0.5)
    assert margins["near"] == pytest.approx(0.01)
    assert math.isnan(margins["flaky"])  # its other value was stopped: nothing to lead
    # the noise a margin is held to: the measure seeds' sd of one choice seed's loss
    near = compared.loc["near"]
    assert near["choice_n"] == 1 and near["close_choice"] and near["choice_margin"] < near["std"]
    document = comparisons(with_seed_roles(load_trials(root, ["c"]), root), "c", root)
    close = {c["key"] for c in document["candidates"] if c["close_choice"]}
    assert close == {"near"}  # base and lucky lead by far more than their sd; cut has no sd
    assert any(line.startswith("close choice (thin)") for line in document["warnings"])
    near = next(c for c in document["candidates"] if c["key"] == "near")
    assert tuned_text(near) == "lr=0.003 (edge) (close)"  # a 2-value grid: every value is an edge


def test_failed_seeds_leave_the_verdict_to_the_pairs_both_sides_completed(compared):
    row = compared.loc["flaky"]
    base, flaky = SWEEP["base"][3], SWEEP["flaky"][3]
    mean, low, high = _interval([flaky[s] - base[s] for s in (0, 2)])
    assert row["n_paired"] == 2 and row["delta_vs_baseline"] == pytest.approx(mean)
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    assert row["missing_seeds"] == [1] and row["failed_seeds"] == [1]
    assert row["error"] == "RuntimeError: CUDA out of memory"


def test_a_candidate_with_a_stopped_seed_has_no_mean_and_says_where_it_stopped(compared):
    row = compared.loc["cut"]
    assert row["state"] == "stopped" and row["stopped_tokens"] == 150
    assert math.isnan(row["mean"]) and row["verdict"] is None and row["no_verdict"] == "stopped"


def test_status_says_which_seeds_chose_and_measured_and_why_there_is_no_verdict(root, capsys, monkeypatch):
    capsys.readouterr()
    assert run("status", "c", "--root", root, "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["choice_seeds"] == [CHOICE] and document["measure_seeds"] == list(MEASURE)
    assert not document["selection_bias"] and not any("selection bias" in w for w in document["warnings"])
    assert document["lr_base_d_model"] is None
    by_key = {c["key"]: c for c in document["candidates"]}
    assert by_key["lucky"]["choice_val_loss_mean"] == pytest.approx(2.0)
    assert by_key["lucky"]["val_loss_mean"] == pytest.approx(2.95)
    expected = {
        "cut": ("stopped by ASHA at 150 tokens", f"shapesweep run {sweep_dir(root, 'c')}/space.yaml "
                f"--scheduler fifo --name c-fifo --root {root}"),
        "unsure": ("its choice trials have not all ended", f"shapesweep resume c --root {root}"),
        "short": ("1 seed paired with the baseline: no interval (seeds 1, 2 not run)",
                  f"shapesweep resume c --root {root}"),
    }
    for key, (why, to_run) in expected.items():
        assert by_key[key]["why"].startswith(why), by_key[key]["why"]
        assert by_key[key]["to_run"] == to_run
    assert by_key["unsure"]["state"] == "choosing" and by_key["short"]["no_verdict"] == "n<2"
    assert by_key["flaky"]["verdict"] is not None and by_key["flaky"]["why"] is None
    assert by_key["flaky"]["missing"] == ("seed 1 failed (RuntimeError: CUDA out of memory): its mean "
                                          "and verdict use the 2 it has")
    assert by_key["flaky"]["to_run_missing"] == f"shapesweep resume c --retry-failed --root {root}"
    assert by_key["lucky"]["missing"] is None

    capsys.readouterr()
    assert run("status", "c", "--root", root, "--format", "csv") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {(r["choice_seeds"], r["measure_seeds"]) for r in rows} == {("100", "0 1 2")}
    assert {r["key"]: r["tuned.lr"] for r in rows}["lucky"] == str(LOW)

    monkeypatch.setenv("COLUMNS", "1000")  # no line folded, however long the tmp path
    assert run("status", "c", "--root", root) == 0
    out = capsys.readouterr().out
    assert "each at the tuned value seeds 100 chose" in out
    assert "seeds: 100 chose each candidate's tuned value (never in a mean, interval or verdict); " \
           "0, 1, 2 measured it" in out
    assert "warning: optimum at the grid's edge: extend the grid (lr of " in out
    assert f"(cut): stopped by ASHA at 150 tokens: no mean from the seeds that survived; run: {expected['cut'][1]}" in out
    assert "missing seeds:\n  deep (flaky): seed 1 failed (RuntimeError: CUDA out of memory)" in out


def test_status_says_at_which_width_lr_values_are_read(tmp_path, capsys, monkeypatch):
    # a space with train.lr_base_d_model: its tuned lr values are at that width, and each
    # candidate trains them scaled (its rows' lr); status says so beside the seeds and shows
    # the lr each candidate trained beside its tuned value
    root = str(tmp_path)
    for key in ("base", "lucky"):
        for seed, loss in SWEEP[key][3].items():
            write_trial(root, "w", {**_row(key, HIGH, seed, loss), "lr": HIGH * 768 / 64}, [])
    space = {"name": "w", "train": {"lr": HIGH, "lr_base_d_model": 768}, "seeds": list(MEASURE)}
    write_sweep_file(root, "w", "space.yaml", yaml.safe_dump(space))
    assert run("status", "w", "--root", root, "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["lr_base_d_model"] == 768
    assert {c["key"]: c["trained_lr"] for c in document["candidates"]} == pytest.approx(
        {"base": 0.036, "lucky": 0.036})
    monkeypatch.setenv("COLUMNS", "1000")
    assert run("status", "w", "--root", root) == 0
    out = capsys.readouterr().out
    assert "seeds: 0, 1, 2; lr values are at d_model 768 (a candidate of width d trains them x 768 / d)" in out
    assert "lr=0.003 (trains 0.036)" in out


def test_the_report_table_says_which_seeds_chose_and_why_a_candidate_has_no_verdict(root):
    from shapesweep.dashboards.report import build_payload

    (table,) = json.loads(build_payload(root, ["c"]))["comparisons"]
    assert table["sweep"] == "c" and table["seeds"].startswith("seeds: 100 chose each candidate's tuned value")
    assert not any("selection bias" in w for w in table["warnings"])
    rows = {row[0]: dict(zip(table["columns"], row, strict=True)) for row in table["rows"]}
    assert rows["wide"]["mean ± std (n)"] == "2.9500 ± 0.0200 (3)"  # the measure seeds' mean only
    assert rows["deep"]["verdict"] == "within noise" and rows["deep"]["seeds for 80% power"].isdigit()
    assert rows["narrow"]["verdict"] == "stopped" and rows["narrow"]["why no verdict or seeds missing; what to run"].startswith(
        "stopped by ASHA at 150 tokens")
    assert rows["tall"]["tuned"] == "-" and rows["tall"]["verdict"] == "choosing"  # nothing chosen yet


def test_export_ranks_candidates_by_their_measure_seeds_alone(root):
    from shapesweep.sweep.verbs.export_command import _seed_means

    ranked = _seed_means(with_seed_roles(load_trials(root, ["c"]), root), "val_loss").set_index("key")
    assert ranked.loc["lucky", "val_loss"] == pytest.approx(2.95) and ranked.loc["lucky", "n"] == 3
    assert not any(t.endswith("-s100") for ids in ranked["trial_ids"] for t in ids)
    assert "cut" not in ranked.index  # a stopped seed: no result to export
    assert list(ranked.index)[0] == "lucky"


@pytest.mark.parametrize(("grid", "biased"), [([LOW], False), ([LOW, HIGH], True)])
def test_selection_bias_is_flagged_only_where_the_measure_seeds_chose(tmp_path, capsys, grid, biased):
    """A one-value `tune:` (a slice of a grid run in parts) chooses nothing; two values chosen
    on the seeds that measure them do."""
    root = str(tmp_path)
    for seed in MEASURE:
        for lr in grid:
            write_trial(root, "plain", {**_row("base", lr, seed, 3.0 + seed / 100 + lr), "trial_id": f"{lr}-{seed}"}, [])
    write_sweep_file(root, "plain", "space.yaml", yaml.safe_dump({"tune": {"lr": grid}, "seeds": list(MEASURE)}))
    capsys.readouterr()
    assert run("status", "plain", "--root", root, "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["selection_bias"] is biased and document["choice_seeds"] == []
    assert any("selection bias" in w for w in document["warnings"]) is biased


# --- the space: parsing and refusals ---------------------------------------------------------

def test_choice_seeds_parse_apart_from_the_tuned_keys_and_cost_trials(tmp_path, capsys):
    path = write_space(tmp_path, tune={"lr": [LOW, HIGH], "choice_seeds": [7, 8]}, seeds=[0, 1, 2])
    space = load_space(path)
    assert space.tune == {"lr": [LOW, HIGH]} and space.choice_seeds == [7, 8]
    assert space.trials_per_candidate() == 2 * 2 + 3
    plain = load_space(write_space(tmp_path, name="plain", tune={"lr": [LOW, HIGH]}, seeds=[0, 1, 2]))
    assert plain.choice_seeds == [] and plain.trials_per_candidate() == 6
    assert plain.space_hash != load_space(write_space(tmp_path, name="plain", tune={
        "lr": [LOW, HIGH], "choice_seeds": [7, 8]}, seeds=[0, 1, 2])).space_hash
    n = len(plan(space).candidates)
    assert run("plan", str(path)) == 0
    assert (f"{n} candidates x (2 tuned settings x 2 choice seeds + 3 measure seeds) = {n * 7} trials"
            in capsys.readouterr().out)


@pytest.mark.parametrize(("tune", "seeds", "key", "problem"), [
    ({"choice_seeds": [100]}, [0], "tune.choice_seeds", "tune: names none"),
    ({"lr": [LOW], "choice_seeds": [100]}, [0], "tune.lr", "one value: nothing to choose"),
    ({"lr": [LOW, HIGH], "choice_seeds": [1]}, [0, 1], "tune.choice_seeds",
     "seed 1 would both choose the tuned values and measure them"),
    ({"lr": [LOW, HIGH], "choice_seeds": ["a"]}, [0], "tune.choice_seeds", "whole numbers"),
    ({"lr": [LOW, HIGH], "choice_seeds": [100, 100]}, [0], "tune.choice_seeds", "given twice"),
])
def test_bad_choice_seeds_are_one_line_exit_2_and_nothing_on_disk(tmp_path, capsys, tune, seeds, key, problem):
    path = write_space(tmp_path, tune=tune, seeds=seeds)
    root = tmp_path / "sweeps"
    for argv in (("plan", str(path)), ("run", str(path), "--root", str(root))):
        assert run(*argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"{path}: {key}: " in err and problem in err, err
    assert not root.exists()


@pytest.mark.parametrize(("options", "key", "problem"), [
    (("--seeds", "0,100"), "--seeds", "seed 100 would both choose the tuned values and measure them"),
    (("--search", "optuna"), "--search", "choice seeds (tune.choice_seeds) choose them per candidate"),
])
def test_run_options_that_contradict_choice_seeds_are_refused(tmp_path, capsys, options, key, problem):
    path = write_space(tmp_path, tune={"lr": [LOW, HIGH], "choice_seeds": [100]})
    root = tmp_path / "sweeps"
    assert run("run", str(path), "--root", str(root), *options) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{key}: " in err and problem in err, err
    assert not root.exists()


# --- a real sweep, killed between a candidate's choice and its measurement -------------------

def _driver(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "shapesweep.sweep.cli", *argv, "--no-progress"],
                            env=CHILD_ENV, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _ray_trials(root: Path, sweep: str) -> dict[str, set[str]]:
    """The trial ids each driver's Tune experiment started (one folder per driver)."""
    folder = Path(sweep_dir(str(root), sweep)) / "_ray"
    return {experiment.name: {p.name for p in experiment.iterdir() if p.is_dir()}
            for experiment in sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime)}


@pytest.mark.slow
def test_resume_after_a_kill_between_choice_and_measure_runs_only_the_missing_trials(local_ray, tmp_path):
    lrs = [1.0e-3, 3.0e-3]
    path = write_space(tmp_path, name="chosen", search={"n_layers": [1, 2]},
                       train={**TINY_TRAIN, "tokens": 4096},
                       tune={"lr": lrs, "choice_seeds": [100]}, seeds=[0, 1])
    candidates = plan(load_space(path)).candidates
    root = tmp_path / "sweeps"
    live = Path(sweep_dir(str(root), "chosen")) / "live"
    args = ("--root", str(root), "--max-concurrent", "1")

    # One trial at a time: the first candidate's two choice trials, then (its choice made)
    # its measure trials. Kill the driver and its Ray when the first measure trial trains.
    first = _driver("run", str(path), *args, "--scheduler", "fifo")
    deadline = time.monotonic() + 300
    while not (live.is_dir() and any(not p.stem.endswith("-s100") for p in live.glob("*.jsonl"))):
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "no measure trial started"
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    held = load_trials(str(root), ["chosen"])
    assert len(held) == 2 and set(held["seed"]) == {100}  # one candidate's choice, no measurement
    (decided,) = set(held["key"])

    code = run("resume", "chosen", *args)
    assert code == 0
    trials = load_trials(str(root), ["chosen"]).set_index("trial_id")
    assert (trials["status"] == "completed").all()
    # Every candidate: both lrs on the choice seed, then the one it chose on seeds 0 and 1.
    assert len(trials) == len(candidates) * (2 + 2)
    for candidate in candidates:
        own = trials[trials["key"] == candidate.key]
        choice = own[own["seed"] == 100]
        assert sorted(json.loads(t)["lr"] for t in choice["tuned_json"]) == lrs
        best = choice["tuned_json"][choice["val_loss"].idxmin()]  # re-derived from the stored rows
        measure = own[own["seed"] != 100]
        assert sorted(measure["seed"]) == [0, 1] and set(measure["tuned_json"]) == {best}
    # The resume started exactly what the kill left missing: the decided candidate's
    # measure trials (the killed one again) and the other candidate's choice and measure trials.
    resumed = list(_ray_trials(root, "chosen").values())[-1]
    assert resumed == set(trials.index) - set(held["trial_id"])
    assert {trials.loc[t, "key"] for t in resumed if trials.loc[t, "seed"] == 100} == {
        c.key for c in candidates} - {decided}
