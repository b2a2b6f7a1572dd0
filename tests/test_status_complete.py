"""`status` of a sweep in any state lists every planned candidate and what each lacks, with
the dashboard and `/api/dashboard` working from a sweep's first live point. No Ray starts:
the sweep folder is written with the store's own API (`write_sweep_file`, `TrialRecord`,
`live.append_point`), its trials those of the planned candidates of a real space."""

from __future__ import annotations

import json

import pytest
import yaml

from shapesweep.dashboards.report import build_payload, expand
from shapesweep.results import live
from shapesweep.results.rows import TrialRecord
from shapesweep.results.store import write_sweep_file
from shapesweep.search_spaces.solver import candidate_document, plan
from shapesweep.search_spaces.space import load_space, parse_space, tuned_json
from shapesweep.sweep.cli.main import main as shapesweep

# demo-quick's shapes and recipe, once without its lr tuning and once with a tuning of its own
SPACE = {key: value for key, value in yaml.safe_load(load_space("demo-quick").source_text).items()
         if key != "tune"} | {"name": "s"}
LRS = [1.5e-3, 3.0e-3]
TUNED_SPACE = SPACE | {"tune": {"lr": LRS}}


class Sweep:
    """A sweep folder as `run` leaves it: its space and options saved, trials landed one by
    one, trials running with their live curves."""

    def __init__(self, root: str, document: dict = SPACE, seeds=(0, 1, 2), search: str = "grid"):
        self.root, self.text = root, yaml.safe_dump(document, sort_keys=False)
        self.space = parse_space(document, self.text, "space.yaml")
        self.candidates = {c.variant: c for c in plan(self.space).candidates}
        write_sweep_file(root, "s", "space.yaml", self.text)
        write_sweep_file(root, "s", "sweep.json", json.dumps({"seeds": list(seeds), "search": search,
                                                               "scheduler": "fifo"}))

    def _parts(self, variant: str, seed: int, tuned: dict | None):
        candidate = self.candidates[variant]
        train = self.space.train_for(tuned or {}, seed, candidate)
        tag = "-".join(f"{k}{v}" for k, v in (tuned or {}).items())
        return candidate, f"{variant}-{tag}-s{seed}", candidate_document(candidate, train)

    def land(self, variant: str, seed: int, loss: float, tuned: dict | None = None,
             status: str = "completed") -> None:
        candidate, trial_id, document = self._parts(variant, seed, tuned)
        curve = [{"step": s, "tokens": s * 1024, "val_loss": loss + 1.0 / s, "train_loss": loss}
                 for s in (75, 150, 300)]
        TrialRecord(sweep="s", trial_id=trial_id, key=candidate.key, seed=seed, status=status,
                    candidate=candidate.to_row(), document=document, budget_tokens=300 * 1024,
                    metrics={"val_loss": loss, "tokens": 300 * 1024, "steps": 300}, curve=curve,
                    tuned_json=tuned_json(tuned or {})).write(self.root)

    def start(self, variant: str, seed: int, points: list[dict], tuned: dict | None = None) -> None:
        candidate, trial_id, document = self._parts(variant, seed, tuned)
        spec = {"trial_id": trial_id, "key": candidate.key, "seed": seed,
                "tuned_json": tuned_json(tuned or {}), "row": candidate.to_row(), "document": document}
        for point in points:
            live.append_point(self.root, "s", spec, point, budget=300 * 1024)


def _status(capsys, *argv: str) -> tuple[int, str]:
    code = shapesweep(["status", *argv])
    return code, capsys.readouterr().out


def _json(capsys, root: str, *argv: str) -> dict:
    code, out = _status(capsys, "s", "--root", root, "--format", "json", *argv)
    assert code == 0
    return json.loads(out)


FIRST_POINTS = ([{"step": 1, "tokens": 1024, "train_loss": 5.5, "elapsed_s": 1.0}],  # no val_loss yet
                [{"step": 1, "tokens": 1024, "train_loss": 5.5, "val_loss": 5.6, "elapsed_s": 1.0}])


@pytest.mark.parametrize(("document", "points"), [(SPACE, FIRST_POINTS[0]), (TUNED_SPACE, FIRST_POINTS[1])],
                         ids=["untuned-train-loss-only", "tuned-first-evaluation"])
def test_the_dashboard_and_status_work_from_the_first_live_point(tmp_path, capsys, points, document):
    """From the first live point until the first trial lands: the report, `status` (table and
    json) and `serve`'s payload, every planned candidate pending with its seeds missing."""
    root = str(tmp_path / "sweeps")
    sweep = Sweep(root, document)
    tuned = {"lr": LRS[0]} if "tune" in document else None
    sweep.start("baseline", 0, points, tuned)
    sweep.start("deep", 0, points, tuned)
    payload = json.loads(build_payload(root, ["s"]))
    assert sorted(expand(payload["rows"])["status"]) == ["running", "running"]
    assert shapesweep(["dashboard", "s", "--root", root, "--out", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    document = _json(capsys, root)
    states = {c["variant"]: (c["state"], c["missing_seeds"], c["running_seeds"]) for c in document["candidates"]}
    assert states == {"baseline": ("pending", [0, 1, 2], [0]), "deep": ("pending", [0, 1, 2], [0]),
                      "wide": ("pending", [0, 1, 2], []), "hourglass": ("pending", [0, 1, 2], [])}
    assert document["baseline"] == "baseline" and document["measure_seeds"] == [0, 1, 2]
    code, out = _status(capsys, "s", "--root", root)
    assert code == 0 and "running now in s" in out and "wide" in out and "seeds 0, 1, 2 missing" in out


def test_the_live_server_answers_from_the_first_live_point(tmp_path):
    from test_serve import get, serving

    root = str(tmp_path / "sweeps")
    sweep = Sweep(root, TUNED_SPACE)
    sweep.start("baseline", 0, FIRST_POINTS[0], {"lr": LRS[0]})
    with serving(root) as port:
        answer = get(port, "/api/dashboard")
        assert answer.status == 200
        assert expand(json.loads(answer.body)["rows"])["status"] == ["running"]
        tables = json.loads(answer.body)["comparisons"]
        assert tables == [] or all("problem" not in t for t in tables)


def test_an_interrupted_sweep_lists_every_candidate_and_counts_seeds_in_flight_as_missing(tmp_path, capsys,
                                                                                         monkeypatch):
    """The issue's interrupted sweep: the baseline has seeds 0 and 1, seed 2 in flight; one
    candidate ran; two never started. Every one is listed with what it lacks."""
    monkeypatch.setenv("COLUMNS", "120")
    root = str(tmp_path / "sweeps")
    sweep = Sweep(root)
    for seed, loss in ((0, 2.30), (1, 2.32)):
        sweep.land("baseline", seed, loss)
    for seed, loss in ((0, 2.35), (1, 2.38), (2, 2.36)):
        sweep.land("deep", seed, loss)
    sweep.start("baseline", 2, FIRST_POINTS[1])
    document = _json(capsys, root)
    by = {c["variant"]: c for c in document["candidates"]}
    assert set(by) == {"baseline", "deep", "wide", "hourglass"}
    assert by["baseline"]["missing_seeds"] == [2] and by["baseline"]["running_seeds"] == [2]
    assert by["deep"]["missing_seeds"] == [] and by["deep"]["verdict"] is not None
    for name in ("wide", "hourglass"):
        assert by[name]["no_verdict"] == "pending" and by[name]["missing_seeds"] == [0, 1, 2]
        assert by[name]["to_run"].startswith("shapesweep resume s")
    code, out = _status(capsys, "s", "--root", root)
    assert code == 0 and "seed 2 running now: its mean and verdict use the 2 it has" in out
    for name in ("wide", "hourglass"):
        line = next(x for x in out.splitlines() if x.strip().startswith(name))
        assert "its trials have not run (seeds 0, 1, 2 missing)" in line, line
    csv_rows = _status(capsys, "s", "--root", root, "--format", "csv")[1].strip().splitlines()
    assert len(csv_rows) == 1 + 4


def test_a_cut_trials_table_says_how_many_it_hides_and_how_to_see_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    root = str(tmp_path / "sweeps")
    sweep = Sweep(root)
    for i, variant in enumerate(("baseline", "deep", "wide")):
        for seed in (0, 1, 2):
            sweep.land(variant, seed, 2.3 + 0.01 * i + 0.001 * seed)
    code, out = _status(capsys, "s", "--root", root, "--top", "4")
    assert code == 0
    assert "the best 4 of 9: 5 more not shown (status s --all lists every one" in " ".join(out.split())
    code, out = _status(capsys, "s", "--root", root, "--all")
    assert code == 0 and "more not shown" not in out
    code, out = _status(capsys, "s", "--root", root)
    assert "not shown" not in out  # 9 trials: all fit the default 20
    assert shapesweep(["status", "s", "--root", root, "--top", "0"]) == 2


def test_an_optuna_sweep_plans_nothing_up_front(tmp_path, capsys):
    """Its candidates are proposed as it runs: only those with trials are listed."""
    root = str(tmp_path / "sweeps")
    sweep = Sweep(root, search="optuna")
    sweep.land("deep", 0, 2.35)
    assert [c["variant"] for c in _json(capsys, root)["candidates"]] == ["deep"]


def _flipping_sweep(root: str, document: dict) -> Sweep:
    """hourglass beats the baseline at the low lr and loses at the high one, on every seed
    (a seed's own noise is shared by both: same data order)."""
    sweep = Sweep(root, document)
    noise = {0: 0.0, 1: 0.03, 2: -0.02}
    for seed, shared in noise.items():
        for lr, base, hourglass in ((LRS[0], 2.40, 2.35), (LRS[1], 2.30, 2.36)):
            sweep.land("baseline", seed, base + shared, {"lr": lr})
            sweep.land("hourglass", seed, hourglass + shared + 0.002 * seed, {"lr": lr})
    return sweep


def test_per_tuned_shows_each_candidate_at_each_value_against_the_baseline(tmp_path, capsys, monkeypatch):
    root = str(tmp_path / "sweeps")
    _flipping_sweep(root, TUNED_SPACE)
    document = _json(capsys, root, "--per", "tuned")
    rows = {(r["variant"], r["tuned"]["lr"]): r for r in document["rows"]}
    assert set(rows) == {(v, lr) for v in ("baseline", "hourglass") for lr in LRS}
    assert [r["variant"] for r in document["rows"]][:2] == ["baseline", "baseline"]  # the anchor first
    low, high = rows[("hourglass", LRS[0])], rows[("hourglass", LRS[1])]
    assert low["verdict_same"] == "better" and high["verdict_same"] == "worse"  # the sign flips with lr
    assert low["delta_same"] == pytest.approx(-0.05 + 0.002, abs=1e-9) and low["n_same"] == 3
    assert low["ci_low_same"] < low["delta_same"] < low["ci_high_same"] < 0
    # the baseline chose lr 3e-3 (2.30 < 2.40): the hourglass's low lr against it
    assert low["baseline_tuned"] == {"lr": LRS[1]} and low["delta_chosen"] == pytest.approx(0.05 + 0.002, abs=1e-9)
    assert low["chosen"] and not high["chosen"] and rows[("baseline", LRS[1])]["chosen"]
    assert rows[("baseline", LRS[1])]["delta_same"] is None and rows[("baseline", LRS[1])]["delta_chosen"] is None
    assert rows[("baseline", LRS[0])]["delta_chosen"] == pytest.approx(0.10, abs=1e-9)
    monkeypatch.setenv("COLUMNS", "200")
    code, out = _status(capsys, "s", "--root", root, "--per", "tuned")
    assert code == 0 and "per tuned value" in out and "better" in out and "worse" in out
    assert "lr=0.003 *" in out
    code, out = _status(capsys, "s", "--root", root, "--per", "tuned", "--format", "csv")
    assert code == 0 and out.splitlines()[0].count("tuned.lr") == 1 and len(out.strip().splitlines()) == 5
    assert shapesweep(["status", "s", "--root", root, "--per", "lr"]) == 2
    assert shapesweep(["status", "--root", root, "--per", "tuned"]) == 2


def test_per_tuned_keeps_choice_seeds_out_of_every_mean(tmp_path, capsys):
    """With `tune.choice_seeds` the values not chosen ran on the choice seed only: listed
    with that seed's loss apart, in no mean or difference."""
    root = str(tmp_path / "sweeps")
    sweep = Sweep(root, TUNED_SPACE | {"tune": {"lr": LRS, "choice_seeds": [100]}})
    for variant, losses in (("baseline", (2.5, 2.3)), ("hourglass", (2.4, 2.6))):
        for lr, loss in zip(LRS, losses, strict=True):
            sweep.land(variant, 100, loss + 5.0, {"lr": lr})  # far off: a leak would show
    for seed in (0, 1, 2):
        sweep.land("baseline", seed, 2.30 + 0.01 * seed, {"lr": LRS[1]})
        sweep.land("hourglass", seed, 2.35 + 0.01 * seed, {"lr": LRS[0]})
    rows = {(r["variant"], r["tuned"]["lr"]): r for r in _json(capsys, root, "--per", "tuned")["rows"]}
    assert rows[("baseline", LRS[1])]["val_loss_mean"] == pytest.approx(2.31)
    assert rows[("baseline", LRS[1])]["n_seeds"] == 3 and rows[("baseline", LRS[1])]["choice_n"] == 1
    other = rows[("hourglass", LRS[1])]
    assert other["state"] == "choice only" and other["val_loss_mean"] is None and other["delta_same"] is None
    assert other["choice_val_loss_mean"] == pytest.approx(7.6)
    chosen = rows[("hourglass", LRS[0])]
    assert chosen["chosen"] and chosen["delta_chosen"] == pytest.approx(0.05) and chosen["delta_same"] is None
