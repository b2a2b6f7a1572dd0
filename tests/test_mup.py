"""Parametrization: init, AdamW groups, and a muP coordinate check on real bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from shapesweep.search_spaces.configs import (
    ConventionalConfig,
    HourglassConfig,
    TrainConfig,
    VariableWidthConfig,
    VisionMLPConfig,
)
from shapesweep.trainers import mup
from shapesweep.trainers.loop import adamw
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure

BASE = 32


def _named_groups(model, groups):
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["weight_decay"], g["lr_scale"]) for g in groups for p in g["params"]}


def test_groups_variable_width_mup():
    config = VariableWidthConfig(d_model=32, n_layers=3, n_heads=4, d_h=64, widths=[16, 64, 40],
                                 resize="projection", activation="simple_gated", bias=True,
                                 tie_embeddings=False)
    model = build_model(config)
    train = TrainConfig(parametrization="mup", mup_base_width=BASE, weight_decay=0.1)
    groups = configure(model, config, train)
    placed = _named_groups(model, groups)
    assert sum(len(g["params"]) for g in groups) == len(placed)  # each param exactly once
    assert set(placed) == {n for n, _ in model.named_parameters()}
    modules = dict(model.named_modules())
    for name, (wd, lr_scale) in placed.items():
        if name.startswith("blocks.") and name.endswith(".weight") and "norm" not in name:
            # muP by fan-in: the down projection against the base d_h (4 x BASE), the rest
            # against the base width; qkv's fan-in is what it reads (layer 0: the embedding)
            fan_in = modules[name.removesuffix(".weight")].in_features
            base_fan_in = 4 * BASE if name.endswith("down.weight") else BASE
            assert (wd, lr_scale) == (0.1, base_fan_in / fan_in), name
        elif name.startswith("resizers."):
            fan_in = model.resizers[name.split(".")[1]].in_features
            assert (wd, lr_scale) == ((0.1, BASE / fan_in) if name.endswith("weight") else (0.0, 1.0))
        elif name == "lm_head.weight":
            assert (wd, lr_scale) == (0.1, 1.0)
        else:  # embedding, norms, biases, simple-gated's alpha
            assert (wd, lr_scale) == (0.0, 1.0), name
    assert model.output_mult == BASE / config.d_model
    # 1/head_dim attention, equal to 1/sqrt(head_dim) at the base width: layer 1 is 2x base.
    attn = model.blocks[1].attn
    assert attn.scale == pytest.approx((attn.head_dim * 64 / BASE) ** -0.5)
    assert model.blocks[0].ffn.alpha.item() == pytest.approx(0.1)


def test_fixed_vision_projection_is_frozen_gaussian():
    config = VisionMLPConfig(d_x=64, d_z=512, d_h=32, n_layers=2, input_projection="fixed", bias=True)
    torch.manual_seed(0)
    model = build_model(config)
    groups = configure(model, config, TrainConfig())
    placed = _named_groups(model, groups)
    assert not any(n.startswith("w_in") for n in placed)
    assert not model.w_in.weight.requires_grad
    assert model.w_in.weight.std().item() == pytest.approx(64**-0.5, rel=0.05)


def test_mup_at_base_width_is_standard_and_deterministic():
    config = ConventionalConfig(d_model=BASE, n_layers=2, n_heads=4, d_h=128, vocab_size=256)
    states, outputs = [], []
    idx = torch.randint(0, 256, (2, 16))
    for init in ("scaled", "mup", "mup"):  # muP at its base width is the `scaled` init
        torch.manual_seed(7)
        model = build_model(config)
        train = TrainConfig(init=init, mup_base_width=BASE)
        groups = configure(model, config, train)
        assert {g["lr_scale"] for g in groups} == {1.0}
        states.append(model.state_dict())
        outputs.append(model(idx))
    for state in states[1:]:
        for key, value in states[0].items():
            torch.testing.assert_close(state[key], value)
    torch.testing.assert_close(outputs[1], outputs[0])


def _corpus() -> torch.Tensor:
    """A few KB of real bytes: the stdlib's json decoder source."""
    with open(json.decoder.__file__, "rb") as f:
        return torch.frombuffer(bytearray(f.read(16384)), dtype=torch.uint8).long()


def _train_and_probe(config, train: TrainConfig, lr: float = 1e-2, steps: int = 5,
                     seq_len: int = 32, batch: int = 4) -> dict[str, list[float]]:
    """A few Adam steps on real bytes; then, on a held probe batch, each block's output RMS
    (`blocks`), how far each FFN's output moved from its start (`ffn_moved`), how far the
    last block's output moved (`last_moved`), and the logits' RMS."""
    data = _corpus()
    torch.manual_seed(0)
    model = build_model(config)
    groups = configure(model, config, train)
    opt = torch.optim.AdamW([{**g, "lr": lr * g["lr_scale"]} for g in groups], betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(steps + 1):
        starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=gen)
        batches.append((torch.stack([data[s : s + seq_len] for s in starts]),
                        torch.stack([data[s + 1 : s + seq_len + 1] for s in starts])))
    probe = batches[-1][0]

    def probe_outputs():
        out = []
        modules = [*model.blocks, *(b.ffn for b in model.blocks)]
        hooks = [m.register_forward_hook(lambda m, a, o: out.append(o.detach().clone())) for m in modules]
        with torch.no_grad():
            out.append(model(probe))
        for hook in hooks:
            hook.remove()
        return out

    before = probe_outputs()
    for x, y in batches[:steps]:
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = probe_outputs()
    n = len(model.blocks)
    rms = lambda t: t.pow(2).mean().sqrt().item()  # noqa: E731
    return {"blocks": [rms(t) for t in after[:n]],
            "ffn_moved": [rms(b - a) for a, b in zip(before[n:2 * n], after[n:2 * n], strict=True)],
            "last_moved": [rms(after[n - 1] - before[n - 1])], "logits": [rms(after[-1])]}


def _spread(values: list[float]) -> float:
    return max(values) / min(values)


def _spreads(runs: list[dict[str, list[float]]], what: str) -> list[float]:
    """max/min across the runs of `what`, per layer."""
    return [_spread([r[what][i] for r in runs]) for i in range(len(runs[0][what]))]


def test_coordinate_check_mup_flat_standard_drifts():
    """Widths x1..x8 at one lr: muP keeps every layer's activation scale flat, standard
    blows up. Measured (lr 1e-2, 5 steps): muP spreads ~1.05 (logits), 1.4-3.1 (blocks);
    standard ~3.4 (logits), 72-122 (blocks)."""
    spreads = {}
    for init in ("normal", "mup"):
        runs = [_train_and_probe(ConventionalConfig(d_model=BASE * m, n_layers=2, n_heads=4,
                                                    d_h=4 * BASE * m, vocab_size=256),
                                 TrainConfig(init=init, mup_base_width=BASE, weight_decay=0.0))
                for m in (1, 2, 4, 8)]
        spreads[init] = (_spreads(runs, "logits")[0], max(_spreads(runs, "blocks")))
    assert spreads["mup"][0] < 1.5 and spreads["mup"][1] < 4.0, spreads
    assert spreads["normal"][0] > 2.5 and spreads["normal"][1] > 20.0, spreads


def test_coordinate_check_ffn_ratio_by_the_down_projections_fan_in():
    """d_h from d_model/2 to 8 d_model at one width: with the down projection scaled by its
    own fan-in (d_h), how far each FFN's output moves in a few steps stays flat; scaled by
    d_model (as standard, and as muP did before) it grows with d_h. Measured (lr 1e-2, 5
    steps): muP spreads 2.7 (layer 0) and 1.5 (layer 1); standard 27 and 2.4."""
    spreads = {}
    for init in ("normal", "mup"):
        runs = [_train_and_probe(ConventionalConfig(d_model=BASE, n_layers=2, n_heads=4, d_h=d_h,
                                                    vocab_size=256),
                                 TrainConfig(init=init, mup_base_width=BASE, weight_decay=0.0))
                for d_h in (16, 32, 64, 128, 256)]
        spreads[init] = _spreads(runs, "ffn_moved")
    assert max(spreads["mup"]) < 4.0, spreads
    assert spreads["normal"][0] > 10.0, spreads


def test_coordinate_check_depth_mup_flat_over_depth():
    """L 2..16 (branches 4..32) at one width: under depth-muP (either exponent) how far the
    last block's output moves in a few steps stays flat; muP by width alone lets it grow with
    depth. Measured (lr 1e-2, 5 steps): spread 1.7 under Tensor Programs VI's, 2.0 under
    CompleteP's, 13 under width-only muP."""
    spreads = {}
    for depth_mup in (False, True, "completep"):
        runs = [_train_and_probe(ConventionalConfig(d_model=BASE, n_layers=L, n_heads=4,
                                                    d_h=4 * BASE, vocab_size=256),
                                 TrainConfig(init="mup", mup_base_width=BASE, weight_decay=0.0,
                                             depth_mup=depth_mup, mup_base_depth=2))
                for L in (2, 4, 8, 16)]
        spreads[depth_mup] = _spreads(runs, "last_moved")[0]
    assert spreads[True] < 2.5 and spreads["completep"] < 3.5 and spreads[False] > 5.0, spreads


def _lr_scales(model, groups) -> dict[str, float]:
    return {name: lr for name, (_, lr) in _named_groups(model, groups).items()}


def test_hourglass_sub_blocks_by_fan_in_and_as_branches():
    """Each hourglass sub-block's down projection reads d_h (base 4 x BASE), its gate|up the
    stream (base BASE); depth-muP counts its k sub-blocks as residual branches."""
    config = HourglassConfig(d_model=2 * BASE, n_layers=3, n_heads=4, d_h=24, k=4, vocab_size=256)
    model = build_model(config)
    groups = configure(model, config, TrainConfig(init="mup", mup_base_width=BASE, weight_decay=0.1))
    lrs = _lr_scales(model, groups)
    assert lrs["blocks.0.ffn.subs.3.down.weight"] == pytest.approx(4 * BASE / 24)
    assert lrs["blocks.0.ffn.subs.3.gate_up.weight"] == pytest.approx(1 / 2)
    assert lrs["blocks.2.attn.o.weight"] == pytest.approx(1 / 2)
    assert {b.branch_mult for b in model.blocks} == {1.0}

    model = build_model(config)
    groups = configure(model, config, TrainConfig(init="mup", mup_base_width=BASE, depth_mup=True,
                                                  mup_base_depth=2))
    branches = 3 * (1 + 4)  # each layer: attention + 4 sub-blocks
    mult = (2 * 2 / branches) ** 0.5
    assert [b.branch_mult for b in model.blocks] == pytest.approx([mult] * 3)
    assert [b.ffn.branch_mult for b in model.blocks] == pytest.approx([mult] * 3)
    lrs = _lr_scales(model, groups)
    assert lrs["blocks.0.ffn.subs.3.down.weight"] == pytest.approx(mult * 4 * BASE / 24)
    assert lrs["blocks.1.attn.qkv.weight"] == pytest.approx(mult / 2)
    assert lrs["wte.weight"] == 1.0 and lrs["blocks.0.ffn.norms.0.weight"] == 1.0
    # the writers start at the base depth's 1/sqrt(2 x 2), whatever the depth
    down = model.blocks[1].ffn.subs[0].down.weight
    expected = 0.02 * (4 * BASE / 24) ** 0.5 / 2
    assert down.std().item() == pytest.approx(expected, rel=0.1)


def test_completep_subblocks_scales_branches_by_one_over_branches_and_keeps_mups_lr():
    """CompleteP over residual branches (alpha 1, the lr-transfer study's `completep`): each
    branch x B_base / B, the branches' matrices at muP's width-only lr, the writers starting at
    the base depth's r, as under Tensor Programs VI; Adam's eps untouched."""
    config = HourglassConfig(d_model=2 * BASE, n_layers=3, n_heads=4, d_h=24, k=4, vocab_size=256)
    model = build_model(config)
    groups = configure(model, config, TrainConfig(init="mup", mup_base_width=BASE,
                                                  depth_mup="completep-subblocks", mup_base_depth=2))
    mult = 2 * 2 / (3 * (1 + 4))
    assert [b.branch_mult for b in model.blocks] == pytest.approx([mult] * 3)
    assert [b.ffn.branch_mult for b in model.blocks] == pytest.approx([mult] * 3)
    lrs = _lr_scales(model, groups)
    assert lrs["blocks.0.ffn.subs.3.down.weight"] == pytest.approx(4 * BASE / 24)
    assert lrs["blocks.1.attn.qkv.weight"] == pytest.approx(1 / 2)
    down = model.blocks[1].ffn.subs[0].down.weight
    assert down.std().item() == pytest.approx(0.02 * (4 * BASE / 24) ** 0.5 / 2, rel=0.1)
    assert all("eps" not in g for g in groups)


def test_completep_is_the_papers_rule_counting_layers():
    """CompleteP as Dey et al. write it: m = L / L_base counts layers, whatever an hourglass
    layer's sub-blocks; every branch x 1/m, muP's lr, Adam eps x 1/m on every group, and the
    writers start at the r of the same model at L_base layers (every write counted)."""
    config = HourglassConfig(d_model=2 * BASE, n_layers=3, n_heads=4, d_h=24, k=4, vocab_size=256)
    model = build_model(config)
    groups = configure(model, config, TrainConfig(init="mup", mup_base_width=BASE,
                                                  depth_mup="completep", mup_base_depth=2))
    mult = 2 / 3  # L_base / L, not 4 / 15 (branches)
    assert [b.branch_mult for b in model.blocks] == pytest.approx([mult] * 3)
    assert [b.ffn.branch_mult for b in model.blocks] == pytest.approx([mult] * 3)
    lrs = _lr_scales(model, groups)
    assert lrs["blocks.0.ffn.subs.3.down.weight"] == pytest.approx(4 * BASE / 24)
    assert lrs["blocks.1.attn.qkv.weight"] == pytest.approx(1 / 2)
    assert [g["eps"] for g in groups] == pytest.approx([1e-8 * mult] * len(groups))
    down = model.blocks[1].ffn.subs[0].down.weight
    base_writes = 2 * (1 + 4)  # the same model at 2 layers
    assert down.std().item() == pytest.approx(0.02 * (4 * BASE / 24) ** 0.5 / base_writes ** 0.5, rel=0.1)
    # the loop's AdamW takes each group's eps
    optimizer = adamw(groups, TrainConfig(init="mup", depth_mup="completep"), fused=False)
    assert [g["eps"] for g in optimizer.param_groups] == pytest.approx([1e-8 * mult] * len(groups))


def test_completep_on_a_k8_hourglass_at_the_base_depth_is_mup():
    """issue 56: a k 8 hourglass at L = L_base is plain muP under the paper's rule (branches x 1),
    where the sub-block variant scales every branch by 8 / 36."""
    config = HourglassConfig(d_model=BASE, n_layers=4, n_heads=4, d_h=32, k=8, vocab_size=256)
    mults = {}
    for rule in ("completep", "completep-subblocks"):
        model = build_model(config)
        configure(model, config, TrainConfig(init="mup", mup_base_width=BASE, depth_mup=rule,
                                             mup_base_depth=4))
        mults[rule] = model.blocks[0].ffn.branch_mult
    assert mults == {"completep": 1.0, "completep-subblocks": pytest.approx(8 / 36)}


@pytest.mark.parametrize("rule", [True, "tp6", "completep", "completep-subblocks"])
def test_depth_mup_at_its_base_depth_is_mup(rule):
    config = ConventionalConfig(d_model=2 * BASE, n_layers=3, n_heads=4, d_h=5 * BASE, vocab_size=256)
    idx = torch.randint(0, 256, (2, 16))
    outputs, states = [], []
    for depth_mup in (False, rule):
        torch.manual_seed(3)
        model = build_model(config)
        groups = configure(model, config, TrainConfig(init="mup", mup_base_width=BASE,
                                                      depth_mup=depth_mup, mup_base_depth=3))
        states.append((model.state_dict(), sorted(g["lr_scale"] for g in groups)))
        outputs.append(model(idx))
    assert states[0][1] == states[1][1]
    for key, value in states[0][0].items():
        torch.testing.assert_close(states[1][0][key], value)
    torch.testing.assert_close(outputs[1], outputs[0])


def test_depth_mup_needs_mup():
    with pytest.raises(ValueError, match="depth_mup needs init: mup"):
        TrainConfig(depth_mup=True)
    with pytest.raises(ValueError, match="depth_mup needs init: mup"):
        TrainConfig(depth_mup="completep")


def test_depth_mup_names_its_rules():
    assert TrainConfig(init="mup", depth_mup="completep").depth_mup == "completep"
    assert TrainConfig(init="mup", depth_mup="completep-subblocks").depth_mup == "completep-subblocks"
    with pytest.raises(ValueError, match="depth_mup"):
        TrainConfig(init="mup", depth_mup="complete-p")


def test_the_docs_rule_table_is_the_modules():
    """docs/lr-transfer.md states trainers/mup.py's tables of muP's and depth-muP's rules line
    for line."""
    def table(text: str) -> list[str]:
        return [line.strip() for line in text.splitlines() if line.strip().startswith("| ")]

    docs = (Path(__file__).resolve().parents[1] / "docs" / "lr-transfer.md").read_text()
    rules = table(mup.__doc__)
    assert len(rules) == 12 and rules[0].startswith("| matrix") and rules[8].startswith("| `depth_mup`")
    section = docs.split("## The rules", 1)[1].split("\n## ", 1)[0]
    assert table(section) == rules
