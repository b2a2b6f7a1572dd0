"""`train.init`: one table of init modes that does not depend on the model family.

Statistics are measured on the built weights (no Ray, no training): the attention of a
conventional and an hourglass model with the same attention shapes starts alike up to the
residual-write factor r = 1/sqrt(W), which counts every residual write (issue 56).
"""

from __future__ import annotations

import math

import pytest
import torch

from shapesweep.common import UserError
from shapesweep.search_spaces.configs import (
    ConventionalConfig,
    HourglassConfig,
    TrainConfig,
    VariableWidthConfig,
    VisionMLPConfig,
)
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import load_space, parse_space
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure

MODES = ("normal", "scaled", "xavier", "mup")


def _built(config, **train):
    torch.manual_seed(0)
    model = build_model(config)
    configure(model, config, TrainConfig(**train))
    return model


def _attention(model) -> dict[str, torch.Tensor]:
    """q, k, v and o weights of every layer, concatenated per kind."""
    parts: dict[str, list[torch.Tensor]] = {"q": [], "k": [], "v": [], "o": []}
    for block in model.blocks:
        a = block.attn
        q, k, v = a.qkv.weight.detach().split([a.q_dim, a.kv_dim, a.kv_dim])
        for name, w in zip("qkvo", (q, k, v, a.o.weight.detach()), strict=True):
            parts[name].append(w.flatten())
    return {name: torch.cat(ws) for name, ws in parts.items()}


def _writes(config) -> int:
    """W: the residual writes, n_layers x (1 attention + the FFN's: 1, or k sub-blocks)."""
    return config.n_layers * (1 + (getattr(config, "k", 0) or 1))


@pytest.mark.parametrize("init", MODES)
def test_fixed_attention_space_starts_with_equal_attention_in_every_family(init):
    """hourglass-fixed-attention-small: baseline (conventional) vs every hourglass k. q, k and
    v start alike in every family; o, a residual write, alike under `normal` and `xavier` and
    at 0.02 / sqrt(W) under `scaled` / `mup`: the same total residual-write variance (o's std
    x sqrt(W)) for every family, where counting layers alone gave an hourglass (1+k)/2 times
    the baseline's."""
    candidates = plan(load_space("hourglass-fixed-attention-small")).candidates
    families = {c.config.family for c in candidates}
    assert families == {"conventional", "hourglass"}
    stats = {c.key: _attention(_built(c.config, init=init, mup_base_width=32)) for c in candidates}
    baseline = next(c for c in candidates if c.variant == "baseline")
    writes = init in ("scaled", "mup")
    for candidate in candidates:
        for name, w in stats[candidate.key].items():
            ref = stats[baseline.key][name]
            # o is a residual write: its std x sqrt(W) is the family-free quantity
            scale = math.sqrt(_writes(candidate.config) / _writes(baseline.config)) \
                if writes and name == "o" else 1.0
            assert w.numel() == ref.numel()
            assert w.std().item() * scale == pytest.approx(ref.std().item(), rel=0.05), \
                (init, candidate.variant, candidate.config.model_dump().get("k"), name)
            assert w.abs().max().item() * scale == pytest.approx(ref.abs().max().item(),
                                                                 rel=0.25), (init, name)


def test_scaled_counts_every_residual_write():
    """r = 1/sqrt(L (1 + k)) for a k-sub-block hourglass: its attention output and each
    sub-block's down projection alike, so the summed variance of its writes, W r^2 0.02^2, is a
    conventional model's whatever k."""
    L = 3
    for k in (2, 8):
        config = HourglassConfig(d_model=64, n_layers=L, n_heads=4, d_h=32, k=k)
        model = _built(config, init="scaled")
        downs = torch.cat([sub.down.weight.flatten() for b in model.blocks for sub in b.ffn.subs])
        expected = 0.02 / math.sqrt(L * (1 + k))
        assert _attention(model)["o"].std().item() == pytest.approx(expected, rel=0.05), k
        assert downs.std().item() == pytest.approx(expected, rel=0.05), k
    conventional = _built(ConventionalConfig(d_model=64, n_layers=L, n_heads=4, d_h=256), init="scaled")
    assert _attention(conventional)["o"].std().item() == pytest.approx(0.02 / math.sqrt(2 * L), rel=0.05)
    # `normal` leaves residual writes alone: the same model's o projection is 0.02
    normal = _built(HourglassConfig(d_model=64, n_layers=L, n_heads=4, d_h=32, k=8))
    assert _attention(normal)["o"].std().item() == pytest.approx(0.02, rel=0.05)


def test_xavier_bounds_each_part_of_fused_matrices():
    """GQA makes q and k|v differ in size: each part gets its own xavier bound."""
    config = ConventionalConfig(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_h=96,
                                tie_embeddings=False, bias=True)
    model = _built(config, init="xavier")
    a, ffn = model.blocks[0].attn, model.blocks[0].ffn
    q, k, v = a.qkv.weight.detach().split([a.q_dim, a.kv_dim, a.kv_dim])
    gate, up = ffn.gate_up.weight.detach().chunk(2)
    matrices = {"q": q, "k": k, "v": v, "o": a.o.weight, "gate": gate, "up": up,
                "down": ffn.down.weight, "lm_head": model.lm_head.weight}
    for name, w in matrices.items():
        fan_out, fan_in = w.shape
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert w.abs().max().item() <= bound + 1e-7, name
        assert w.abs().max().item() > 0.9 * bound, name
        assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1), name
    assert model.wte.weight.std().item() == pytest.approx(0.02, rel=0.05)  # embeddings stay normal
    assert a.qkv.bias.abs().max().item() == 0.0
    assert all(b.attn.o.weight.std().item() == pytest.approx(a.o.weight.std().item(), rel=0.1)
               for b in model.blocks)  # the same at every depth


def test_mup_matches_the_previous_rule_where_it_had_no_confound():
    """Conventional and variable-width models write 2 per layer: muP's std is what it was,
    0.02 / sqrt(width_mult) / sqrt(2 L) for residual writes."""
    base, L = 32, 3
    for config in (ConventionalConfig(d_model=128, n_layers=L, n_heads=4, d_h=256),
                   VariableWidthConfig(d_model=128, n_layers=L, n_heads=4, d_h=256,
                                       widths=[128, 64, 128])):
        model = _built(config, init="mup", mup_base_width=base)
        for block in model.blocks:
            mult = block.width / base
            assert block.attn.o.weight.std().item() == pytest.approx(
                0.02 / math.sqrt(mult) / math.sqrt(2 * L), rel=0.1)
            assert block.attn.qkv.weight.std().item() == pytest.approx(
                0.02 / math.sqrt(mult), rel=0.05)
        assert model.output_mult == base / model.readout


def test_vision_scaled_is_hourglass_mlp_fan_in_gaussian():
    c = VisionMLPConfig(d_x=64, d_z=256, d_h=64, n_layers=4)
    scaled, normal = _built(c, init="scaled"), _built(c, init="normal")
    assert scaled.w_in.weight.std().item() == pytest.approx(64 ** -0.5, rel=0.05)
    assert scaled.blocks[0].w2.weight.std().item() == pytest.approx((64 * 4) ** -0.5, rel=0.05)
    assert normal.blocks[0].w2.weight.std().item() == pytest.approx(64 ** -0.5, rel=0.05)
    xavier = _built(c, init="xavier")
    assert xavier.blocks[0].w1.weight.abs().max().item() <= math.sqrt(6 / (256 + 64)) + 1e-7


def test_init_and_parametrization_resolve_or_refuse():
    assert (TrainConfig().init, TrainConfig().parametrization) == ("normal", "standard")
    assert TrainConfig(parametrization="mup").init == "mup"
    assert TrainConfig(init="mup").parametrization == "mup"
    assert TrainConfig(init="xavier").parametrization == "standard"
    doc = {"name": "x", "family": "conventional", "budget": {"non_embedding_params": 30912},
           "fixed": {"d_model": 32, "n_heads": 2, "n_layers": 2}, "solve": "d_h",
           "train": {"parametrization": "mup", "init": "xavier"}}
    with pytest.raises(UserError) as error:
        parse_space(doc, file="x.yaml")
    message = str(error.value)
    assert message.startswith("x.yaml: train: init 'xavier' contradicts parametrization 'mup'")
    assert "\n" not in message
