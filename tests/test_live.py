"""Watching a sweep: live curves of running trials, `status` that fits 80 columns, progress
with an ETA, ASHA's default grace period, and figures that say what they show. No Ray starts."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
from synthetic import synthetic_sweep

from shapesweep.dashboards.figures import applicable_figures, pareto_figure, searched_figure
from shapesweep.dashboards.frames import with_derived
from shapesweep.dashboards.report import build_payload, expand, write_report
from shapesweep.results import live
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.store import compact, load_curves, load_trials, write_trial
from shapesweep.search_spaces.space import list_builtin
from shapesweep.sweep.cli.main import main as shapesweep

POINT_FIELDS = ("step", "tokens", "train_loss", "val_loss", "lr", "elapsed_s")


def _spec(row: dict, trial_id: str) -> dict:
    """What the driver hands `live.append_point`: a trial spec (`sweep.search.trials.trial_spec`)."""
    return {"trial_id": trial_id, "key": row["key"], "seed": row["seed"], "tuned_json": "{}",
            "row": {k: v for k, v in row.items() if k not in ("trial_id", "status", "sweep")},
            "document": json.loads(row["config_json"])}


def _points(curve: list[dict]) -> list[dict]:
    return [{k: p.get(k) for k in POINT_FIELDS} for p in curve]


@pytest.fixture
def sweep(tmp_path):
    """A sweep `s` with two landed trials and one running (three evaluation points so far)."""
    root = str(tmp_path / "sweeps")
    pairs = synthetic_sweep("s", 3, families=("hourglass",), seed=6)
    for row, curve in pairs[1:]:
        write_trial(root, "s", row, curve)
    row, curve = pairs[0]
    for point in _points(curve)[:3]:
        live.append_point(root, "s", _spec(row, "run-1"), point, budget=int(row["tokens"]))
    return root, row, curve


def test_a_running_trial_is_read_back_with_its_latest_loss_and_tokens(sweep):
    root, row, curve = sweep
    rows, curves = live.load_live(root, ["s"])
    assert rows["trial_id"].tolist() == ["run-1"] and rows["status"].tolist() == ["running"]
    assert rows["val_loss"].iloc[0] == pytest.approx(curve[2]["val_loss"])
    assert rows["tokens"].iloc[0] == curve[2]["tokens"]
    assert rows["train_tokens_budget"].iloc[0] == row["tokens"] and rows["key"].iloc[0] == row["key"]
    assert curves["step"].tolist() == [p["step"] for p in curve[:3]]
    # a line still being written (no newline yet) is not read
    path = Path(root) / "s" / "live" / "run-1.jsonl"
    with open(path, "a") as handle:
        handle.write('{"point": {"step": 99')
    assert len(live.load_live(root, ["s"])[1]) == 3
    live.remove(root, "s", "run-1")
    assert live.load_live(root, ["s"])[0].empty and live.live_sweeps(root) == ["s"]


def test_a_retried_trial_s_points_replace_those_from_the_step_it_went_back_to(sweep):
    """A retry from an earlier checkpoint evaluates steps 2 and 3 again: one point per step."""
    root, row, curve = sweep
    again = [{**p, "val_loss": p["val_loss"] + 1.0} for p in _points(curve)[1:3]]
    for point in again:
        live.append_point(root, "s", _spec(row, "run-1"), point)
    points = live.load_live(root, ["s"])[1]
    assert points["step"].tolist() == [p["step"] for p in curve[:3]]
    assert points["val_loss"].tolist()[1:] == pytest.approx([p["val_loss"] for p in again])


def test_running_trials_join_the_stored_ones_until_their_row_lands(sweep):
    root, row, curve = sweep
    trials, curves = load_trials(root, ["s"]), load_curves(root, ["s"])
    merged, merged_curves = live.with_running(trials, curves, *live.load_live(root, ["s"]))
    assert sorted(merged["status"]) == sorted([*trials["status"], "running"])
    assert len(merged_curves) == len(curves) + 3
    # the row lands (the writer then removes the live file; a reader in between sees it once)
    write_trial(root, "s", {**row, "trial_id": "run-1", "status": "completed", "finished_at": None},
                [{**point, "trial_id": "run-1"} for point in curve])
    trials, curves = load_trials(root, ["s"]), load_curves(root, ["s"])
    merged, _ = live.with_running(trials, curves, *live.load_live(root, ["s"]))
    assert len(merged) == len(trials) and "running" not in set(merged["status"])
    # a retry newer than its stored (failed) row replaces it
    live.remove(root, "s", "run-1")
    live.append_point(root, "s", _spec(row, "run-1"), _points(curve)[0], budget=int(row["tokens"]))
    merged, merged_curves = live.with_running(trials, curves, *live.load_live(root, ["s"]))
    retried = merged[merged["trial_id"] == "run-1"]
    assert retried["status"].tolist() == ["running"]
    assert (merged_curves["trial_id"] == "run-1").sum() == 1


def test_compaction_by_the_driver_removes_live_files_a_killed_driver_left(sweep):
    root, _, _ = sweep
    compact(root, "s", grace_s=0)  # fresh: a trial may still be appending
    assert not live.load_live(root, ["s"])[0].empty
    compact(root, "s", grace_s=0, stale_s=0)  # the driver holding the sweep: nothing runs
    assert live.load_live(root, ["s"])[0].empty


def _status(capsys, *argv) -> tuple[int, str, str]:
    code = shapesweep(["status", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_status_shows_running_trials_and_fits_80_columns(sweep, capsys, monkeypatch):
    root, row, curve = sweep
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = _status(capsys, "s", "--root", root)
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80 and "…" not in out
    running = out[out.index("running now in s"):]
    # named by variant and shape (the trial id run-1 stays in --format json)
    assert f"{row['variant']} {row['d_model']}×{row['n_layers']}L" in running and "run-1" not in running
    assert f"{curve[2]['val_loss']:.4f}" in running
    assert "225M of 600M" in running  # tokens of the budget, in the one formatter's units
    trials = out[out.index("trials of s"):]
    assert "error" not in trials  # no trial has an error: no empty column
    assert f"{row['variant']} {row['d_model']}×{row['n_layers']}L" in trials and row["key"] not in trials
    assert re.search(r"│ +\d+ │", trials) and ".0000 │" not in trials.split("val_loss")[0]
    # The sweeps list counts a live curve as a running trial only while a driver holds the
    # sweep's live lease: without one (a killed driver's leftovers) nothing runs (issue 57).
    code, out, _ = _status(capsys, "--root", root)
    assert code == 0 and "1 running" not in out and "1 completed, 1 stopped" in out
    ParquetStore(root).take_lease("s", "this-test")  # this process: a live driver
    code, out, _ = _status(capsys, "--root", root)
    assert code == 0 and "1 running" in out and max(len(x) for x in out.splitlines()) <= 80
    # a failed trial brings the error column, its text beside that trial only
    write_trial(root, "s", {**row, "trial_id": "bad", "status": "failed", "val_loss": None,
                            "error": "ValueError: boom"}, [])
    code, out, _ = _status(capsys, "s", "--root", root)
    trials = out[out.index("trials of s"):]
    assert code == 0 and "error" in trials and "ValueError:" in trials and "boom" in trials


def test_status_of_a_missing_sweep_creates_nothing(tmp_path, capsys):
    root = tmp_path / "nowhere"
    code, _, err = _status(capsys, "gone", "--root", str(root))
    assert code == 2 and "no sweep named 'gone'" in err
    assert _status(capsys, "--root", str(root))[0] == 0
    assert not root.exists()


def test_status_shows_integer_shape_fields_as_integers():
    from shapesweep.sweep.verbs.status_view import shape_label as _shape

    candidate = {"d_model": 64, "n_layers": 4, "d_h": 256, "k": 2.0, "beta": 0.25}
    assert _shape(candidate, ("d_h", "k", "beta")) == "64×4L d_h=256 k=2 beta=0.25"


def test_status_leaves_out_the_fields_that_do_not_shape_a_constant_width_model():
    from shapesweep.sweep.verbs.status_view import shape_label as _shape

    row = {"family": "variable_width", "d_model": 64, "n_layers": 6, "d_h": 170,
           "beta": 0.5, "alpha": 0.3}
    details = ("d_h", "shape", "beta", "alpha")
    assert _shape({**row, "shape": "constant"}, details) == "64×6L d_h=170 shape=constant"
    assert _shape({**row, "shape": "bottleneck"}, details) == \
        "64×6L d_h=170 shape=bottleneck beta=0.5 alpha=0.3"


def _trial(tune_id: str, key: str, seed: int, row: dict):
    """A Tune trial as the progress callback sees it: its id and its spec."""
    spec = {"trial_id": f"{key}-s{seed}", "key": key, "seed": seed, "tuned_json": "{}", "row": row}
    return type("Trial", (), {"trial_id": tune_id, "config": {"spec": spec}})()


BASELINE_ROW = {"family": "conventional", "variant": "baseline", "d_model": 64, "n_layers": 4, "d_h": 256}
HOURGLASS_ROW = {"family": "hourglass", "variant": "hourglass", "d_model": 80, "n_layers": 6, "d_h": 37, "k": 2}


def test_progress_prints_plain_lines_with_an_eta(monkeypatch):
    from rich.console import Console

    from shapesweep.sweep.driver.progress import SweepProgress

    out = io.StringIO()
    progress = SweepProgress(total=4, console=Console(file=io.StringIO()), out=out, budget=1000,
                             every_s=0)
    trial = _trial("t1", "abc", 0, BASELINE_ROW)
    with progress:
        progress.on_trial_start(0, [], trial)
        progress.on_trial_result(0, [], trial, {"tokens": 500, "val_loss": 4.25})
    line = out.getvalue().splitlines()[0]
    assert line.startswith("progress: 0/4 trials ended, 1 running; tokens 500/4K at ")
    assert re.search(r"ETA (\d+h\d\dm|\d+m\d\ds|\d+s);", line)
    assert "best val_loss 4.2500 (baseline 64×4L d_h=256, seed 0)" in line


def test_the_live_box_names_each_candidate_with_its_seeds_and_tokens():
    """Not only trials and a best loss: each candidate by name, its seeds done / running of
    those planned, the tokens its trials trained, its completed seeds' mean loss; 80 columns."""
    from rich.console import Console

    from shapesweep.sweep.driver.progress import SweepProgress

    planned = [{"key": key, "seed": seed, "tuned_json": "{}", "row": row}
               for key, row in (("abc", BASELINE_ROW), ("def", HOURGLASS_ROW)) for seed in (0, 1, 2)]
    progress = SweepProgress(total=6, console=Console(file=io.StringIO()), out=io.StringIO(),
                             budget=1000, planned=planned)
    first, second, third = (_trial("t1", "abc", 0, BASELINE_ROW), _trial("t2", "abc", 1, BASELINE_ROW),
                            _trial("t3", "def", 0, HOURGLASS_ROW))
    for trial in (first, second, third):
        progress.on_trial_start(0, [], trial)
    progress.on_trial_result(0, [], second, {"tokens": 300, "val_loss": 4.5})
    progress.on_trial_result(0, [], third, {"tokens": 200, "val_loss": 4.75})
    progress.finished("t1", "completed", "abc-s0", None,
                      {"key": "abc", "seed": 0, "tuned_json": "{}", "val_loss": 4.25, "tokens": 1000,
                       **BASELINE_ROW})
    console = Console(file=io.StringIO(), width=80)
    console.print(progress.render())
    text = console.file.getvalue()
    assert max(len(x) for x in text.splitlines()) <= 80
    lines = {line.strip().split("  ")[0]: line.strip() for line in text.splitlines()}
    baseline = lines["baseline 64×4L d_h=256"]
    assert re.search(r"1/3 done, 1 running\s+1.3K\s+4\.2500$", baseline), baseline
    hourglass = lines["hourglass 80×6L d_h=37 k=2"]
    assert re.search(r"0/3 done, 1 running\s+200\s+-$", hourglass), hourglass
    assert "abc" not in text and "def" not in text  # names, not keys


@pytest.mark.parametrize(("budget", "step", "grace"), [
    (60_000, 4096, 30_000),  # 14 steps in all: half the budget, the most room ASHA gets
    (50_000_000, 65_536, 6_553_600),  # 100 steps beat 1/8 of the budget
    (1_000_000_000, 65_536, 125_000_000),  # 1/8 of the budget beats 100 steps
])
def test_asha_grace_is_100_steps_and_an_eighth_of_the_budget(budget, step, grace):
    from shapesweep.sweep.search.scheduling import asha_grace

    assert asha_grace(budget, step) == grace


def test_report_is_world_readable_under_the_usual_umask(sweep, tmp_path):
    root, _, _ = sweep
    old = os.umask(0o022)
    try:
        out = write_report(root, ["s"], tmp_path / "r.html")
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o644


def test_payload_marks_running_stopped_and_failed_trials_with_a_reason(sweep):
    root, _, _ = sweep
    payload = json.loads(build_payload(root))
    rows = expand(payload["rows"])
    reasons = dict(zip(rows["trial_id"], rows["reason"], strict=True))
    assert reasons["run-1"] == "running: 225M of 600M tokens"
    for trial_id, status, reason in zip(rows["trial_id"], rows["status"], rows["reason"], strict=True):
        if status == "stopped_early":
            assert re.fullmatch(r"stopped by ASHA at [\d.]+[KMG]? tokens", reason), trial_id
        if status == "completed":
            assert reason is None
    assert payload["sweeps"][0]["counts"]["running"] == 1


def _iso_budget_frame(params: list[int], ratios: list[float]) -> pd.DataFrame:
    pairs = synthetic_sweep("iso", len(params), families=("conventional",), seed=3)
    rows = [{**row, "trial_id": f"t{i}", "key": f"k{i}", "status": "completed", "seed": 0,
             "tuned_json": "{}", "params_non_embedding": p, "budget_error": 0.004,
             "width_depth_ratio": r, "val_loss": 3.0 + abs(r - 40) / 100}
            for i, ((row, _), p, r) in enumerate(zip(pairs, params, ratios, strict=True))]
    return with_derived(pd.DataFrame(rows))


def test_an_iso_budget_sweep_plots_loss_against_the_searched_dimension():
    ratios = [10.0, 20.0, 40.0, 80.0, 160.0]
    trials = _iso_budget_frame([100_000, 100_400, 99_700, 100_200, 99_900], ratios)
    assert pareto_figure(trials, "params_non_embedding") is None  # x would be rounding noise
    fig = searched_figure(trials)
    (trace,) = fig.data
    assert sorted(trace["x"]) == ratios and fig.layout["xaxis"]["title"]["text"] == "width_depth_ratio (log)"
    assert all(t in ("(1 seed)",) or "±" in t for t in [x.strip() for x in trace["text"]])
    spread = _iso_budget_frame([100_000, 200_000, 400_000, 800_000, 1_600_000], ratios)
    assert pareto_figure(spread, "params_non_embedding") is not None and searched_figure(spread) is None


def test_one_trial_draws_no_pareto_panels_and_hover_never_says_plus_minus_dash():
    (row, curve), = synthetic_sweep("one", 1, families=("hourglass",), seed=2)
    trials = with_derived(pd.DataFrame([{**row, "status": "completed"}]))
    curves = pd.DataFrame([{**p, "sweep": "one", "trial_id": row["trial_id"]} for p in curve])
    ids = [i for i, _ in applicable_figures(trials, curves)]
    assert not [i for i in ids if i.startswith("pareto")] and "curves-lm" in ids
    trials = _iso_budget_frame([100_000, 200_000, 400_000, 800_000, 1_600_000], [10.0, 20, 40, 80, 160])
    fig = pareto_figure(trials, "params_non_embedding")
    for trace in fig.data:
        assert "error_y" not in (trace.get("hovertemplate") or "")
        assert all("-" not in t for t in (trace.get("text") or []))


def test_train_prints_a_plain_line_per_evaluation_and_json_alone_on_stdout(tmp_path, capsys,
                                                                           one_torch_thread):
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"family": "conventional",
                                    "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_h": 64},
                                    "train": {"steps": 20, "seq_len": 32, "batch_tokens": 512,
                                              "eval_tokens": 1024, "eval_every": 10}}))
    assert shapesweep(["train", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["steps"] == 20
    lines = [line for line in err.splitlines() if line.startswith("train: step ")]
    assert [line.split()[2] for line in lines] == ["2", "10", "20"]  # the early look, the cadence
    assert all(re.search(r"val_loss \d+\.\d{4} .* tokens/s elapsed \d+s$", line) for line in lines)


@pytest.mark.slow
def test_a_real_sweep_streams_live_curves_and_leaves_none_behind(local_ray, tmp_path, capsys):
    """Real Ray, the default scheduler: which one and why is announced before the sweep
    starts; while trials run their live files exist (a reader sees them); when the sweep
    ends none is left."""
    import threading
    import time

    from sweep_helpers import run, write_space

    space = write_space(tmp_path)
    root = tmp_path / "sweeps"
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            rows = live.load_live(str(root))[0] if root.exists() else pd.DataFrame()
            seen.extend(rows["trial_id"].tolist() if len(rows) else [])
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert run("run", str(space), "--root", str(root), "--max-concurrent", "2") == 0
    finally:
        done.set()
        watcher.join()
    err = capsys.readouterr().err
    assert "scheduler: FIFO, every trial to its whole budget (one seed: no seed mean to judge " \
           "on; --scheduler asha overrides)" in err
    landed = load_trials(str(root), ["tiny-depths"])
    assert seen and set(seen) <= set(landed["trial_id"])
    assert live.load_live(str(root))[0].empty and not list((root / "tiny-depths" / "live").iterdir())


@pytest.mark.parametrize("width", [80, 120])
def test_plan_and_spaces_fit_the_terminal(capsys, monkeypatch, width):
    """plan cuts no cell to `…` (it leaves out whole columns and says which); spaces keeps
    one line a space, names whole, the description cut to fit (whole with --wide)."""
    monkeypatch.setenv("COLUMNS", str(width))
    assert shapesweep(["plan", "demo-ucurve"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= width and "…" not in out
    assert re.search(r"^│ baseline +│", out, re.M) and re.search(r"^│ hourglass +│", out, re.M)  # names
    if width == 80:
        assert "left out at 80 columns:" in out and "--format csv has them all" in out
    assert shapesweep(["spaces", "--fast"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= width
    names = [line.split(" ", 1)[0] for line in out.splitlines()]
    assert all(name in names for name, _ in list_builtin())
    assert shapesweep(["spaces", "--fast", "--wide"]) == 0
    assert "…" not in capsys.readouterr().out
