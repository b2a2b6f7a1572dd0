"""Parametrization: init, AdamW groups, and a muP coordinate check on real bytes."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from shapesweep.search_spaces.configs import (
    ConventionalConfig,
    TrainConfig,
    VariableWidthConfig,
    VisionMLPConfig,
)
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
    for name, (wd, lr_scale) in placed.items():
        if name.startswith("blocks.") and name.endswith(".weight") and "norm" not in name:
            layer = int(name.split(".")[1])
            assert (wd, lr_scale) == (0.1, BASE / config.widths[layer]), name
        elif name.startswith("resizers."):
            fan_in = model.resizers[name.split(".")[1]].in_features
            assert (wd, lr_scale) == ((0.1, BASE / fan_in) if name.endswith("weight") else (0.0, 1.0))
        elif name == "lm_head.weight":
            assert (wd, lr_scale) == (0.1, 1.0)
        else:  # embedding, norms, biases, seed 003's alpha
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


def _activation_rms(parametrization: str, width_mult: int, data: torch.Tensor,
                    lr: float = 1e-2, steps: int = 5, seq_len: int = 32, batch: int = 4):
    """RMS of the logits and of block 0's output after a few Adam steps."""
    d = BASE * width_mult
    config = ConventionalConfig(d_model=d, n_layers=2, n_heads=4, d_h=4 * d, vocab_size=256)
    torch.manual_seed(0)
    model = build_model(config)
    train = TrainConfig(parametrization=parametrization, mup_base_width=BASE, lr=lr, weight_decay=0.0)
    groups = configure(model, config, train)
    opt = torch.optim.AdamW([{**g, "lr": lr * g["lr_scale"]} for g in groups], betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=gen)
        x = torch.stack([data[s : s + seq_len] for s in starts])
        y = torch.stack([data[s + 1 : s + seq_len + 1] for s in starts])
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    hidden = {}
    hook = model.blocks[0].register_forward_hook(lambda m, a, out: hidden.setdefault("h", out))
    with torch.no_grad():
        logits = model(x)
    hook.remove()
    rms = lambda t: t.pow(2).mean().sqrt().item()  # noqa: E731
    return rms(logits), rms(hidden["h"])


def _spread(values: list[float]) -> float:
    return max(values) / min(values)


def test_coordinate_check_mup_flat_standard_drifts():
    """Widths x1..x8 at one lr: muP keeps activation scales flat, standard blows up.

    Measured (lr 1e-2, 5 steps): muP spreads ~1.1 (logits) and ~1.5-1.9 (hidden);
    standard ~4 (logits) and ~300 (hidden).
    """
    data = _corpus()
    spreads = {}
    for parametrization in ("standard", "mup"):
        rms = [_activation_rms(parametrization, m, data) for m in (1, 2, 4, 8)]
        spreads[parametrization] = [_spread([r[i] for r in rms]) for i in range(2)]
    mup_logits, mup_hidden = spreads["mup"]
    sp_logits, sp_hidden = spreads["standard"]
    assert mup_logits < 1.5 and mup_hidden < 3.0, spreads
    assert sp_logits > 2.5 and sp_hidden > 20.0, spreads
