"""Readers that stay fast: a sweep in flight (compacted file, fragments since, a retry, the live
area) reads like the same sweep compacted, its many fragments read as one dataset scan; the
dashboard's payload stays lean per trial. Real Parquet stores of synthetic trials; no Ray."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from synthetic import synthetic_sweep

from shapesweep.dashboards.report import build_payload, load_frames
from shapesweep.results import live, store
from shapesweep.results.store import FragmentCache, compact, load_curves, load_trials, write_trial

N_LOOSE = store.BULK + 4  # enough fragments that a reader scans them as one dataset


def _write(root: str, pairs) -> None:
    for row, curve in pairs:
        write_trial(root, "s", row, curve)


def _retry(row: dict, curve: list[dict]) -> tuple[dict, list[dict]]:
    """A later attempt of the same trial, with another loss: the newest must win."""
    later = row["finished_at"] + pd.Timedelta(hours=1)
    return ({**row, "val_loss": row["val_loss"] + 1.0, "finished_at": later},
            [{**point, "val_loss": point["val_loss"] + 1.0} for point in curve])


def _start_live(root: str, row: dict, curve: list[dict]) -> None:
    spec = {"trial_id": "run-1", "key": row["key"], "seed": row["seed"], "tuned_json": "{}",
            "row": {k: v for k, v in row.items() if k not in ("trial_id", "status", "sweep")},
            "document": json.loads(row["config_json"])}
    for point in curve[:2]:
        live.append_point(root, "s", spec, {k: point[k] for k in ("step", "tokens", "val_loss")},
                          budget=int(row["tokens"]))


def _frames(root: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    trials, curves = load_frames(root, ["s"])
    return (trials.sort_values("trial_id").reset_index(drop=True),
            curves.sort_values(["trial_id", "step"]).reset_index(drop=True))


def test_a_sweep_in_flight_reads_like_the_same_sweep_compacted(tmp_path):
    pairs = synthetic_sweep("s", 10 + N_LOOSE, families=("hourglass",), seed=3)
    retry = _retry(*pairs[2])
    mixed, merged = str(tmp_path / "mixed"), str(tmp_path / "merged")
    _write(mixed, pairs[:10])
    compact(mixed, "s", grace_s=0)  # a killed driver's earlier compaction, then more trials
    _write(mixed, [*pairs[10:], retry])
    _start_live(mixed, *pairs[0])
    shutil.copytree(mixed, merged)
    compact(merged, "s", grace_s=0)
    assert len(list(Path(mixed, "s", "trials").glob("part-*"))) == N_LOOSE + 1
    assert [p.name[:8] for p in Path(merged, "s", "trials").iterdir()] == ["compact-"]

    trials, curves = _frames(mixed)
    pd.testing.assert_frame_equal(trials, _frames(merged)[0])
    pd.testing.assert_frame_equal(curves, _frames(merged)[1])
    assert len(trials) == len(pairs) + 1 and (trials["status"] == "running").sum() == 1
    retried = trials.set_index("trial_id").loc[retry[0]["trial_id"]]
    assert retried["val_loss"] == retry[0]["val_loss"]
    for reader in (load_trials, load_curves):
        assert reader(mixed, ["s"]).equals(reader(merged, ["s"]))


def test_a_compaction_killed_midway_loses_and_duplicates_nothing(tmp_path):
    """The driver compacts while its sweep runs; a kill after the new version is published,
    before the old one is deleted, leaves the merged file alone in view (a raw glob never
    sees both), which reads as the finished compaction does, through a shared cache (what
    `status` does) or without, and the next compaction tidies up."""
    pairs = synthetic_sweep("s", 6 + N_LOOSE, families=("hourglass",), seed=5)
    killed, merged = str(tmp_path / "killed"), str(tmp_path / "merged")
    _write(killed, pairs[:6])
    compact(killed, "s", grace_s=0)  # the sweep's earlier compaction
    _write(killed, [*pairs[6:], _retry(*pairs[1]), _retry(*pairs[8])])
    _start_live(killed, *pairs[0])
    shutil.copytree(killed, merged)
    compact(merged, "s", grace_s=0)
    trials_dir = Path(killed, "s", "trials")

    def visible() -> set[Path]:  # what readers list: not the temporary names being written
        return {p for p in trials_dir.iterdir() if not p.name.startswith(".")}

    before = visible()
    child = subprocess.Popen([sys.executable, "-c", "import sys; from shapesweep.results.store import compact; "
                              "compact(sys.argv[1], 's', grace_s=600)", killed], env=os.environ)
    while visible() == before:  # the new version is published, then the grace
        assert child.poll() is None, "the compaction ended before it was killed"
        time.sleep(0.05)
    child.kill()
    child.wait()
    assert len(visible()) == 1 and not visible() & before
    assert len(list(Path(killed, "s", ".versions").iterdir())) == 2  # the old one, not yet deleted

    for reader in (load_trials, load_curves):
        cache = FragmentCache()
        assert reader(killed, ["s"], cache=cache).equals(reader(merged, ["s"]))
        assert reader(killed, ["s"]).equals(reader(merged, ["s"]))
    pd.testing.assert_frame_equal(_frames(killed)[0], _frames(merged)[0])
    pd.testing.assert_frame_equal(_frames(killed)[1], _frames(merged)[1])
    compact(killed, "s", grace_s=0)
    assert [p.name[:8] for p in trials_dir.iterdir()] == ["compact-"]
    assert len(list(Path(killed, "s", ".versions").iterdir())) == 1
    assert load_curves(killed, ["s"]).equals(load_curves(merged, ["s"]))


def test_a_shared_cache_reads_many_fragments_as_each_read_alone(tmp_path):
    """`status` reads trials and curves through one FragmentCache: a many-fragment folder is
    scanned once and split by file; a fragment landing later is added, a retry replaces."""
    root = str(tmp_path / "sweeps")
    pairs = synthetic_sweep("s", N_LOOSE + 1, families=("conventional",), seed=6)
    _write(root, pairs[:-1])
    cache = FragmentCache()
    for reader in (load_trials, load_curves):
        assert reader(root, ["s"], cache=cache).equals(reader(root, ["s"]))
    _write(root, [pairs[-1], _retry(*pairs[3])])
    for reader in (load_trials, load_curves):
        assert reader(root, ["s"], cache=cache).equals(reader(root, ["s"]))
    assert len(load_trials(root, ["s"], cache=cache)) == len(pairs)


def test_a_damaged_fragment_among_many_is_named_and_the_rest_read(tmp_path, capsys):
    root = str(tmp_path / "sweeps")
    pairs = synthetic_sweep("s", N_LOOSE, families=("conventional",), seed=4)
    _write(root, pairs)
    damaged = sorted(Path(root, "s", "trials").glob("part-t00005-*"))[0]
    damaged.write_bytes(damaged.read_bytes()[:100])
    trials = load_trials(root, ["s"])
    assert sorted(trials["trial_id"]) == sorted(r["trial_id"] for r, _ in pairs if r["trial_id"] != "t00005")
    assert f"skipping {damaged}: not a Parquet file (truncated?)" in capsys.readouterr().err
    assert len(load_curves(root, ["s"])) == sum(len(c) for r, c in pairs if r["trial_id"] != "t00005")


PAYLOAD_BYTES_PER_TRIAL = 850  # 300 synthetic trials: 1,770 with a hover text per trial, 1,400 with
# its title built in the page, 740 with typed, coded and shared arrays (`report._lean`)


def test_the_dashboard_payload_stays_lean_per_trial(tmp_path):
    root = str(tmp_path / "sweeps")
    pairs = synthetic_sweep("s", 300, seed=2)
    _write(root, pairs)
    compact(root, "s", grace_s=0)
    payload = build_payload(root, ["s"])
    assert len(payload) / len(pairs) < PAYLOAD_BYTES_PER_TRIAL
    # A trial's hover title is built in the page from its row: no trial id travels twice.
    assert "· trial t00001" not in payload and payload.count('"t00001"') == 1
    data = json.loads(payload)
    rows = data["rows"]
    assert len(rows["hover"]["values"]) < len(pairs) / 2  # seeds share their candidate's text
    # Figures name their points by row id: a candidate's text travels once, in the rows.
    assert all(payload.count(json.dumps(body)) == 1 for body in rows["hover"]["values"])
    assert data["shared"]  # the Pareto figures' points, once for all cost axes


def test_configs_split_as_parsed_whether_cut_or_parsed():
    """`_split_configs` cuts a canonical config at its train block and parses any other text:
    the documents and ids are the same as parsing every text gives."""
    from shapesweep.dashboards.report import _split_configs

    def parsed(texts):  # the plain way: parse each text, re-encode its two parts
        docs, trains, doc_of, train_of = {}, {}, [], []
        for text in texts:
            doc = json.loads(text)
            train = json.dumps(doc.pop("train", None), sort_keys=True)
            doc_of.append(docs.setdefault(json.dumps(doc, sort_keys=True), len(docs)))
            train_of.append(trains.setdefault(train, len(trains)))
        return doc_of, train_of, [json.loads(d) for d in docs], [json.loads(t) for t in trains]

    model = {"d_model": 64, "lr": 1e-3, "note": 'a, "train": in text'}
    canonical = [json.dumps({"family": "f", "model": model, "train": {"seed": s, "lr": 0.5}}, sort_keys=True)
                 for s in (0, 1, 0)]
    others = [json.dumps({"model": model, "train": {"seed": 1, "lr": 0.5}}),  # not sorted: the same parts
              json.dumps({"model": model}),  # no train block
              json.dumps({"train": {"a": {"train": 1}, "z": 2}, "z_last": 1}, sort_keys=True),  # train not last
              json.dumps({"model": {"train": 3}, "train": None}, sort_keys=True),
              '{"model": {"d_model":64}, "train": {"seed": 1}}',  # spaced unlike json.dumps
              '{"a": 1, "train": 1, "train": {"seed": 2}}']  # a repeated key: the last one counts
    texts = canonical + others
    assert _split_configs(pd.Series(texts + [None])) == tuple(
        part + [None] if index < 2 else part for index, part in enumerate(parsed(texts)))
