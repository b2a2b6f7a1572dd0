"""The noise-aware ASHA on a real sweep (real Ray Tune, real training, real Parquet): each
candidate is judged on its seeds' cooled rung losses once all have arrived, a clearly worse
candidate is stopped whole, a near-tie below the cut is kept, the baseline is never
stopped, and a trial paused at a rung and resumed ends exactly where it would have."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from sweep_helpers import TINY_SPACE, TINY_TRAIN, run, write_space

from shapesweep.results.store import load_curves, load_trials, read_sweep_file, sweep_dir
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.sweep.driver.trainable import START_FIELD
from shapesweep.sweep.search.paired_asha import DECISIONS_FILE
from shapesweep.trainers.loop import train

pytestmark = pytest.mark.slow

GOOD, BAD = 3.0e-3, 1.0e-5  # at 1e-5 a 16-step model barely moves from ln(256)
RUNGS = [1024, 6144]  # grace 1024 x 6^i below the 8192-token budget: steps 2 and 12


def test_the_noise_aware_asha_stops_clearly_worse_candidates_whole(local_ray, tmp_path, capsys,
                                                                    one_torch_thread):
    space_path = write_space(
        tmp_path, {**TINY_SPACE, "name": "paired"},
        variants=[{"name": "baseline", "search": {"n_layers": [2]}},
                  {"name": "shape", "search": {"n_layers": [1, 3]}}],
        tune={"lr": [GOOD, BAD]}, seeds=[0, 1],
        train={**TINY_TRAIN, "decay": "wsd", "eval_every": 4})  # cooled losses at the rungs
    root = tmp_path / "sweeps"
    # reduction factor 6: one candidate kept untested at each rung, every other compared with it
    assert run("run", str(space_path), "--root", str(root), "--scheduler", "asha",
               "--grace-tokens", "1024", "--reduction-factor", "6", "--max-concurrent", "2") == 0
    assert "scheduler: noise-aware ASHA (--scheduler asha): each candidate's 2-seed mean cooled " \
           "loss at 1.02K tokens (12%), 6.14K tokens (75%)" in capsys.readouterr().err

    trials = load_trials(str(root), ["paired"])
    trials["lr"] = trials["tuned_json"].map(lambda text: json.loads(text)["lr"])
    assert len(trials) == 12 and (trials["status"] != "failed").all()
    by_candidate = trials.groupby(["key", "lr"])
    for (_, lr), seeds in by_candidate:
        statuses = set(seeds["status"])
        assert len(statuses) == 1, seeds[["trial_id", "status"]]  # never some seeds stopped
        variant = seeds["variant"].iloc[0]
        if variant == "baseline":
            assert statuses == {"completed"}  # even at lr 1e-5, the worst of all
        elif lr == BAD:
            assert statuses == {"stopped_early"}
            assert set(seeds["tokens"]) == {RUNGS[0]}  # at the first rung, where it was judged
        else:
            assert statuses == {"completed"}

    decisions = json.loads(read_sweep_file(str(root), "paired", DECISIONS_FILE))
    stopped = [d for d in decisions if d["stop"]]
    assert len(stopped) == 2 and all(d["ci_low"] > 0 and not d["protected"] for d in stopped)
    # a near-tie: a good candidate below the cut (compared with it), its interval across zero
    near_ties = [d for d in decisions if not d["stop"] and d["cut_key"] is not None]
    assert near_ties and all(d["ci_low"] <= 0 <= d["ci_high"] for d in near_ties)
    assert any(d["protected"] and not d["stop"] for d in decisions)

    # status reports the stopped candidates with their evidence, and the cooled fidelity
    capsys.readouterr()
    assert run("status", "paired", "--root", str(root), "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert [d["key"] for d in document["asha_stopped"]] == [d["key"] for d in stopped]
    assert [p["tokens"] for p in document["rank_fidelity_cooled"]] == [*RUNGS, 8192]

    # the rung losses judged are the cooled ones the curves hold at the rungs
    curves = load_curves(str(root), ["paired"]).merge(trials[["trial_id", "key", "tuned_json",
                                                              "seed"]])
    at_rungs = curves[curves["tokens"].isin(RUNGS)]
    assert at_rungs["val_loss_cooled"].notna().all()
    cooled = at_rungs.set_index(["key", "tuned_json", "tokens", "seed"])["val_loss_cooled"]
    for d in decisions:
        assert d["losses"] == {seed: cooled[d["key"], d["tuned_json"], d["rung_tokens"], int(seed)]
                               for seed in d["losses"]}
        assert len(d["losses"]) == 2

    # every trial paused at a rung (all but its candidate's last seed) resumed from the
    # checkpoint it saved there and ended exactly where an uninterrupted run ends
    starts = {path.parent.name: {json.loads(line)[START_FIELD] for line in path.read_text().splitlines()}
              for path in (Path(sweep_dir(str(root), "paired")) / "_ray").glob("*/*/result.json")}
    resumed = {trial_id for trial_id, steps in starts.items() if steps != {0}}
    assert resumed and all(steps <= {0, 2, 12} for steps in starts.values()), starts
    for row in trials[trials["status"] == "completed"].itertuples():
        document = json.loads(row.config_json)
        config = make_config(document["model"] | {"family": document["family"]})
        alone = train(config, TrainConfig(**document["train"]))
        assert alone.val_loss == row.val_loss, row.trial_id
        assert pd.notna(row.cooldown_tokens) and row.cooldown_tokens > 0
