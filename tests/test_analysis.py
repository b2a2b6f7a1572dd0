"""xformer §4's representation analysis: the two measures by hand, the hooks on every LM
family, the end-of-trial hook of the real loop, the `layers` table through the real store,
and a real sweep that lands layer rows (slow)."""

from __future__ import annotations

import math
import os
import shutil
import threading
from datetime import timedelta
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import torch
from synthetic import synthetic_sweep
from torch import nn

from shapesweep.common import UserError
from shapesweep.results.store import (
    FragmentCache,
    compact,
    load_curves,
    load_layers,
    load_trials,
    write_trial,
)
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers import analysis
from shapesweep.trainers.loop import StopTrial, train
from shapesweep.trainers.models import build_model

TINY = {"vocab_size": 256, "n_heads": 2, "d_model": 32, "n_layers": 3}
CONFIGS = {
    **{f"conventional-{act}": {"family": "conventional", "d_h": 48, "activation": act, **TINY}
       for act in ("relu", "gelu", "swiglu", "geglu", "simple_gated")},
    "hourglass": {"family": "hourglass", "d_h": 16, "k": 2, **TINY},
    "variable_width": {"family": "variable_width", "d_h": 64, "shape": "bottleneck", "alpha": 0.5,
                       **TINY, "n_layers": 4},
}
TRAIN = {"steps": 3, "seq_len": 32, "batch_tokens": 256, "eval_tokens": 1024}


def _orthonormal(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    """`cols` orthonormal columns of length `rows`."""
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(rows, cols, generator=g, dtype=torch.float64))[0]


def _basis(n: int, k: int, seed: int = 1) -> torch.Tensor:
    """`k` orthonormal rows of length `n`."""
    return _orthonormal(n, k, seed).T


def _entropy(z: torch.Tensor) -> float:
    return float(analysis.matrix_entropy(z))


# ---------------------------------------------------------------- the measures by hand


def test_matrix_entropy_by_hand():
    """The xformer paper's Eq. 2 as Queipo-de-Llano et al. define it: the singular values of the
    tokens x features matrix itself (not centred), over log of the rank it can have."""
    tokens, features = 50, 4
    u, v = _orthonormal(tokens, features), _basis(features, features)
    # equal energy in every direction: the maximum, 1
    assert _entropy(3.0 * u @ v) == pytest.approx(1.0, abs=1e-12)
    # singular values 3, 2, 1, 0: p = 9/14, 4/14, 1/14, 0, over log of the rank bound (4)
    z = u @ torch.diag(torch.tensor([3.0, 2.0, 1.0, 0.0], dtype=torch.float64)) @ v
    p = [9 / 14, 4 / 14, 1 / 14]
    assert _entropy(z) == pytest.approx(-sum(q * math.log(q) for q in p) / math.log(4))
    # not centred: every token the same nonzero point is rank one (0), and a large common
    # offset (a massive activation shared by the tokens) collapses the entropy
    assert _entropy(torch.ones(tokens, features)) == pytest.approx(0.0, abs=1e-12)
    assert _entropy(z + 100.0) < 0.01 < _entropy(z)
    assert _entropy(torch.zeros(tokens, features)) == 0.0
    # the rank bound is min(tokens, features): 3 tokens in 8 features span at most 3 directions
    assert _entropy(_orthonormal(3, 3) @ _basis(8, 3)) == pytest.approx(1.0, abs=1e-12)
    assert math.isnan(_entropy(torch.ones(1, 8)))  # one token: no spread to measure
    # batched: one value per matrix
    both = analysis.matrix_entropy(torch.stack([3.0 * u @ v, torch.ones(tokens, features, dtype=torch.float64)]))
    assert both.tolist() == pytest.approx([1.0, 0.0], abs=1e-12)


def test_density_counts_magnitudes_above_each_threshold():
    a = torch.tensor([[-2.0, -0.5, -0.05, 0.005], [0.05, 0.5, 2.0, 0.0]])
    assert analysis.above(a, (0.01, 0.1, 1.0)).tolist() == [6, 4, 2]
    assert analysis.above(a, (0.5,)).tolist() == [2]  # strictly above


# ---------------------------------------------------------------- the hooks on every family


def _model(name: str):
    torch.manual_seed(0)
    config = make_config(CONFIGS[name])
    return config, build_model(config)


def _windows(n_seq: int = 4, seq_len: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Held-out-like sequences and their next tokens."""
    chunk = torch.randint(0, 256, (n_seq, seq_len + 1), generator=torch.Generator().manual_seed(0))
    return chunk[:, :-1], chunk[:, 1:]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_one_row_per_layer_and_threshold(name):
    config, model = _model(name)
    rows = analysis.analyse(model, *_windows())
    widths = [int(s.width) for s in config.layer_shapes()]
    assert [(r["layer"], r["threshold"]) for r in rows] == [
        (layer, t) for layer in range(1, config.n_layers + 1) for t in analysis.THRESHOLDS]
    assert [r["width"] for r in rows[:: len(analysis.THRESHOLDS)]] == widths
    for r in rows:
        assert 0.0 < r["matrix_entropy"] <= 1.0 and 0.0 <= r["activation_density"] <= 1.0
        assert r["lens_logprob"] < 0 and r["lens_entropy"] > 0 and r["lens_kl"] >= 0
    densities = [r["activation_density"] for r in rows[: len(analysis.THRESHOLDS)]]
    assert densities == sorted(densities, reverse=True) and densities[0] > 0
    assert model.training and not model.blocks[0]._forward_hooks  # left as it was found


def test_the_residual_stream_is_the_whole_global_stream_one_matrix_per_sequence():
    """The last layer's entropy is that of the stream the final norm reads (a constant-width
    model), and for the ><former that of the stream as wide as its widest layer; each
    sequence is its own matrix, and the layer's value their mean (not the pooled tokens')."""
    for name in ("conventional-swiglu", "variable_width"):
        _, model = _model(name)
        seen = {}
        handle = model.blocks[-1].register_forward_hook(lambda m, i, out, seen=seen: seen.update(stream=out))
        rows = analysis.analyse(model, *_windows())
        handle.remove()
        stream = seen["stream"]
        assert stream.shape[-1] == model.stream_width
        per_sequence = [_entropy(s) for s in stream]
        assert rows[-1]["matrix_entropy"] == pytest.approx(sum(per_sequence) / len(per_sequence), rel=1e-12)
        assert rows[-1]["matrix_entropy"] != pytest.approx(_entropy(stream.flatten(0, 1)), rel=1e-3)


def test_logit_lens_decodes_every_layer_as_the_model_decodes_its_last():
    """The last layer's lens is the model's own prediction (mean log probability of the
    targets = minus its cross-entropy); a layer that writes nothing decodes as the layer
    before it (KL 0, the same log probability and entropy)."""
    for name in ("conventional-swiglu", "variable_width"):
        _, model = _model(name)
        x, y = _windows()
        rows = analysis.analyse(model, x, y)[:: len(analysis.THRESHOLDS)]
        with torch.no_grad():
            cross_entropy = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        assert rows[-1]["lens_logprob"] == pytest.approx(-cross_entropy.item(), rel=1e-5)
        with torch.no_grad():  # layer 2 writes nothing: attention and FFN outputs zero
            model.blocks[1].attn.o.weight.zero_()
            model.blocks[1].ffn.down.weight.zero_()
        rows = analysis.analyse(model, x, y)[:: len(analysis.THRESHOLDS)]
        assert rows[1]["lens_kl"] == pytest.approx(0.0, abs=1e-9) and rows[0]["lens_kl"] > 1e-6
        for column in ("lens_logprob", "lens_entropy"):
            assert rows[1][column] == pytest.approx(rows[0][column], rel=1e-6)


def test_the_analysed_tokens_grow_with_the_stream_width():
    """At least TOKENS_PER_FEATURE tokens per stream feature (and MIN_TOKENS), in whole
    sequences; all the held-out ones when fewer are held out."""
    _, model = _model("variable_width")
    val = torch.zeros(1000, 64, dtype=torch.long)
    x, y = analysis.sequences(val, val, model)
    assert len(x) == len(y) == math.ceil(analysis.MIN_TOKENS / 64)
    model.stream_width = 4096  # as wide as a full-size ><former's stream: 32,768 tokens
    assert len(analysis.sequences(val, val, model)[0]) == 512
    assert len(analysis.sequences(val[:10], val[:10], model)[0]) == 10


def test_density_reads_the_inner_activation_before_the_down_projection():
    """relu MLP with zero up weights and up bias 0.5: every inner activation is exactly 0.5."""
    config = make_config({**CONFIGS["conventional-relu"], "bias": True})
    model = build_model(config)
    with torch.no_grad():
        for block in model.blocks:
            block.ffn.up.weight.zero_()
            block.ffn.up.bias.fill_(0.5)
    rows = analysis.analyse(model, *_windows(), thresholds=(0.1, 0.5, 1.0))
    assert [r["activation_density"] for r in rows] == [1.0, 0.0, 0.0] * config.n_layers


def test_hourglass_density_pools_its_sub_blocks():
    _, model = _model("hourglass")
    assert len(analysis.down_projections(model.blocks[0])) == 2
    with torch.no_grad():  # sub-block 2 of every layer: all inner activations zero
        for block in model.blocks:
            block.ffn.subs[1].gate_up.weight.zero_()
    rows = analysis.analyse(model, *_windows(), thresholds=(0.0,))
    assert all(r["activation_density"] == pytest.approx(0.5, abs=0.01) for r in rows)


def test_default_on_for_variable_width_and_refusals():
    recipe = TrainConfig(**TRAIN)
    assert analysis.wanted(make_config(CONFIGS["variable_width"]), recipe)
    assert analysis.wanted(make_config({**CONFIGS["variable_width"], "shape": "constant"}), recipe)
    assert not analysis.wanted(make_config(CONFIGS["hourglass"]), recipe)
    assert analysis.wanted(make_config(CONFIGS["hourglass"]), TrainConfig(**TRAIN, analysis=True))
    assert not analysis.wanted(make_config(CONFIGS["variable_width"]), TrainConfig(**TRAIN, analysis=False))
    vision = make_config({"family": "vision_mlp", "d_x": 64, "d_z": 96, "d_h": 32, "n_layers": 2,
                          "d_out": 64, "task": "denoise"})
    assert not analysis.wanted(vision, recipe)
    with pytest.raises(UserError, match="train.analysis: the representation analysis needs a language model"):
        analysis.wanted(vision, TrainConfig(**TRAIN, analysis=True))
    _, model = _model("conventional-gelu")
    model.blocks[1].ffn = nn.Linear(32, 32)
    with pytest.raises(UserError, match="layer 2's FFN \\(Linear\\) has no `down` projection"):
        analysis.check(model)


# ---------------------------------------------------------------- the loop's end-of-trial hook


def test_a_trial_ends_with_its_analysis(one_torch_thread):
    vformer = make_config(CONFIGS["variable_width"])
    result = train(vformer, TrainConfig(**TRAIN))
    assert len(result.layers) == vformer.n_layers * len(analysis.THRESHOLDS)
    assert result.to_dict()["layers"] == result.layers  # what `train --json` prints
    assert train(make_config(CONFIGS["conventional-swiglu"]), TrainConfig(**TRAIN)).layers == []
    assert train(vformer, TrainConfig(**TRAIN, analysis=False)).layers == []

    def stop(metrics):
        raise StopTrial
    assert train(vformer, TrainConfig(**TRAIN), callback=stop).layers == []  # stopped: none


# ---------------------------------------------------------------- the layers table in the store


def _trials(sweep: str = "s", n: int = 4) -> list[tuple[dict, list[dict], list[dict]]]:
    """Completed synthetic ><former trials, each with layer rows of its own widths."""
    out = []
    for i, (row, curve) in enumerate(synthetic_sweep(sweep, n, families=("variable_width",),
                                                     budgets=(30e6,), seeds=1, curve_points=3)):
        row.update(status="completed", error=None, val_loss=2.5 + i / 100)
        layers = [{"layer": layer, "width": width, "matrix_entropy": 0.5 + i / 100,
                   "activation_density": 1 / (1 + t) - layer / 1000, "threshold": t}
                  for layer, width in enumerate(row["widths"], start=1) for t in analysis.THRESHOLDS]
        out.append((row, curve, layers))
    return out


@pytest.fixture
def store(tmp_path) -> Path:
    for row, curve, layers in _trials():
        write_trial(tmp_path / "root", "s", row, curve, layers)
    return tmp_path / "root"


def test_layer_rows_are_written_with_their_trial_and_read_back(store):
    layers = load_layers(store, ["s"])
    trials = load_trials(store, ["s"])
    assert sorted(set(layers["trial_id"])) == sorted(trials["trial_id"])
    n_layers = dict(zip(trials["trial_id"], trials["n_layers"], strict=True))
    assert len(layers) == sum(n_layers.values()) * len(analysis.THRESHOLDS)
    assert list(layers.columns) == ["sweep", "trial_id", "layer", "width", "matrix_entropy",
                                    "activation_density", "threshold", "lens_logprob",
                                    "lens_entropy", "lens_kl"]
    one = layers[layers["trial_id"] == "t00001"]
    assert one["layer"].is_monotonic_increasing and set(one["matrix_entropy"]) == {0.51}
    # one fragment per table, under the trial's one name
    names = {table: sorted(p.name for p in (store / "s" / table).iterdir())
             for table in ("trials", "curves", "layers")}
    assert names["trials"] == names["curves"] == names["layers"]


def test_a_trial_without_layers_writes_no_layers_file(tmp_path):
    row, curve, _ = _trials("plain")[0]
    write_trial(tmp_path, "plain", row, curve)
    assert not list((tmp_path / "plain" / "layers").iterdir())  # the folder is laid out empty
    assert load_layers(tmp_path, ["plain"]).empty and len(load_curves(tmp_path, ["plain"])) == 3


def test_layer_rows_of_another_trial_or_column_are_refused(tmp_path):
    row, curve, layers = _trials()[0]
    with pytest.raises(ValueError, match="layer row for trial 'x' in trial 't00000'"):
        write_trial(tmp_path, "s", row, curve, [{**layers[0], "trial_id": "x"}])
    with pytest.raises(ValueError, match="unknown layer columns: depth"):
        write_trial(tmp_path, "s", row, curve, [{**layers[0], "depth": 0.5}])
    assert not (tmp_path / "s").exists()  # refused before anything is written


def test_a_retry_replaces_its_layers_and_orphans_are_never_read(store):
    row, curve, layers = _trials()[0]
    row.update(finished_at=row["finished_at"] + timedelta(hours=1))
    write_trial(store, "s", row, curve, [{**r, "matrix_entropy": 0.9} for r in layers])
    orphan = store / "s" / "layers" / "part-t00009-99999999999999999999-000000000000.parquet"
    shutil.copy(next((store / "s" / "layers").glob("part-t00001-*")), orphan)  # no trials sibling
    layers_now = load_layers(store, ["s"])
    assert set(layers_now[layers_now["trial_id"] == "t00000"]["matrix_entropy"]) == {0.9}
    assert "t00009" not in set(layers_now["trial_id"])
    os.utime(orphan, (0, 0))
    compact(store, "s", grace_s=0)  # an orphan older than an hour is a crashed writer's
    assert not orphan.exists()


def test_compaction_merges_layers_and_sets_a_damaged_trials_layers_aside(store, capsys):
    row, curve, layers = _trials()[0]
    row.update(finished_at=row["finished_at"] + timedelta(hours=1))
    write_trial(store, "s", row, curve, [{**r, "matrix_entropy": 0.9} for r in layers])
    damaged = next((store / "s" / "trials").glob("part-t00002-*"))
    damaged.write_bytes(b"")
    before = load_layers(store, ["s"])
    merged = compact(store, "s", grace_s=0, stale_s=0)
    assert [p.name for p in (store / "s" / "layers").iterdir()] == [Path(merged).name]
    raw = ds.dataset(store / "s" / "layers", format="parquet").to_table().to_pandas()
    assert sorted(set(raw["trial_id"])) == ["t00000", "t00001", "t00003"]
    assert set(raw[raw["trial_id"] == "t00000"]["matrix_entropy"]) == {0.9}  # the retry's only
    assert [p.name for p in (store / "s" / "damaged" / "layers").iterdir()] == [damaged.name]
    assert load_layers(store, ["s"]).equals(before)
    capsys.readouterr()


def test_a_reader_during_compaction_sees_every_trials_layers(store):
    """A reader that read the trials before a compaction and lists the layers after it
    must look again, not lose the layers of the trials it read."""
    more = _trials(n=30)
    for row, curve, layers in more[4:20]:
        write_trial(store, "s", row, curve, layers)
    expected = len(load_layers(store, ["s"]))
    done, seen = threading.Event(), []

    def read_until_done():
        while not done.is_set():
            layers = load_layers(store, ["s"])
            seen.append((len(layers), layers["trial_id"].nunique() == len(load_trials(store, ["s"]))))

    reader = threading.Thread(target=read_until_done)
    reader.start()
    for row, curve, layers in more[20:]:
        compact(store, "s", grace_s=0.01)
        write_trial(store, "s", row, curve, layers)
    done.set()
    reader.join()
    assert seen and all(n >= expected for n, _ in seen)


def test_fragment_cache_reads_layers_like_the_store(store):
    cache = FragmentCache()
    for _ in range(2):
        assert load_layers(store, cache=cache).equals(load_layers(store))


# ---------------------------------------------------------------- a real sweep (Ray)


VFORMER_SPACE = {
    "name": "tiny-vformer",
    "family": "variable_width",
    "budget": {"match": {"shape": "constant"}, "tolerance": 0.1},
    "fixed": {"d_model": 32, "n_layers": 4, "n_heads": 2, "d_h": 64, "vocab_size": 256,
              "activation": "swiglu"},
    "search": {"shape": ["constant", "bottleneck"]},
    "train": {"tokens": 4096, "seq_len": 32, "batch_tokens": 512, "lr": 3.0e-3, "eval_tokens": 1024},
}


@pytest.mark.slow
def test_a_real_sweep_lands_layer_rows_and_their_figure(local_ray, tmp_path):
    from sweep_helpers import run, write_space

    root = tmp_path / "sweeps"
    space_path = write_space(tmp_path, VFORMER_SPACE)
    assert run("run", str(space_path), "--root", str(root), "--scheduler", "fifo",
               "--max-concurrent", "2") == 0
    trials, layers = load_trials(root, ["tiny-vformer"]), load_layers(root, ["tiny-vformer"])
    assert len(trials) == 2 and (trials["status"] == "completed").all()
    assert set(trials["shape"]) == {"constant", "bottleneck"}
    for trial in trials.itertuples():
        mine = layers[layers["trial_id"] == trial.trial_id]
        assert len(mine) == trial.n_layers * len(analysis.THRESHOLDS)
        assert mine["width"].tolist()[:: len(analysis.THRESHOLDS)] == list(trial.widths)
        assert mine["matrix_entropy"].between(0, 1).all() and mine["activation_density"].between(0, 1).all()
    assert len(list((root / "tiny-vformer" / "layers").iterdir())) == 1  # compacted at the end
    out = tmp_path / "report.html"
    assert run("dashboard", "tiny-vformer", "--root", str(root), "--out", str(out)) == 0
    assert '"id": "layers"' in out.read_text()
