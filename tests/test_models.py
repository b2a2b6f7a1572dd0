"""The torch models match the accounting exactly and compute what the seeds describe."""

from __future__ import annotations

import random

import pytest
import torch
from pydantic import ValidationError
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import (
    ConventionalConfig,
    HourglassConfig,
    TrainConfig,
    VariableWidthConfig,
    VisionMLPConfig,
)
from shapesweep.trainers.models import build_model, count_params
from shapesweep.trainers.mup import configure

ACTIVATIONS = ["relu", "gelu", "swiglu", "geglu", "simple_gated"]


def _lm_fields(rng: random.Random) -> dict:
    n_heads = rng.choice([1, 2, 4])
    fields = {
        "n_heads": n_heads,
        "n_kv_heads": rng.choice([h for h in (1, 2, 4) if n_heads % h == 0]),
        "n_layers": rng.randint(1, 5),
        "d_h": rng.randint(4, 80),
        "bias": rng.random() < 0.5,
        "vocab_size": rng.randint(16, 300),
        "tie_embeddings": rng.random() < 0.5,
        "norm_order": rng.choice(["pre", "post"]),
    }
    if rng.random() < 0.3:  # explicit head_dim that does not divide d_model evenly
        fields |= {"head_dim": rng.choice([4, 6, 8]), "d_model": rng.randint(8, 72)}
    else:
        fields["d_model"] = n_heads * rng.choice([4, 8, 12, 16])
    return fields


def random_config(rng: random.Random):
    """One valid random config of a random family (retries until pydantic accepts it)."""
    while True:
        family = rng.choice(["conventional", "hourglass", "variable_width", "vision_mlp"])
        try:
            if family == "vision_mlp":
                return VisionMLPConfig(
                    d_x=rng.randint(4, 48), d_z=rng.randint(4, 96), d_h=rng.randint(2, 96),
                    n_layers=rng.randint(1, 4), d_out=rng.randint(2, 48),
                    input_projection=rng.choice(["fixed", "trained"]),
                    activation=rng.choice(["relu", "gelu"]), bias=rng.random() < 0.5,
                )
            fields = _lm_fields(rng)
            if family == "conventional":
                return ConventionalConfig(**fields, activation=rng.choice(ACTIVATIONS))
            if family == "hourglass":
                return HourglassConfig(**fields, k=rng.randint(1, 4),
                                       activation=rng.choice(["swiglu", "geglu"]))
            fields.pop("head_dim", None)
            fields["d_model"] = 2 * fields["n_heads"] * rng.randint(2, 8)
            fields["n_layers"] = rng.randint(1, 6)
            shape = rng.choice(["constant", "grow", "shrink", "diamond", "bottleneck", "widths"])
            unit = 2 * fields["n_heads"]
            if shape == "widths":
                extra = {"widths": [unit * rng.randint(1, 10) for _ in range(fields["n_layers"])]}
            else:
                alpha = rng.uniform(1.2, 2.0) if shape == "diamond" else rng.uniform(0.3, 0.9)
                extra = {"shape": shape, "alpha": alpha, "beta": rng.uniform(0.2, 0.8)}
            return VariableWidthConfig(**fields, **extra, activation=rng.choice(ACTIVATIONS),
                                       resize=rng.choice(["carry", "zero", "projection"]))
        except ValidationError:
            continue


def _dead_weights(model, logits: torch.Tensor) -> list[str]:
    """Parameters with a whole row or column that gets no gradient (xformer's "valid" count:
    nothing is allocated that cannot affect the output)."""
    logits.logsumexp(-1).sum().backward()
    dead = []
    for name, p in model.named_parameters():
        grad = p.grad.abs() if p.grad is not None else torch.zeros_like(p)
        slices = [grad.sum(1), grad.sum(0)] if grad.dim() == 2 else [grad.reshape(-1)]
        if name == "wte.weight":  # rows of tokens absent from the batch get none; columns must
            slices = slices[1:]
        if any((s == 0).any() for s in slices):
            dead.append(name)
    return dead


def _inputs(config, batch: int = 2, seq_len: int = 8) -> torch.Tensor:
    if isinstance(config, VisionMLPConfig):
        return torch.randn(batch, config.d_x)
    return torch.randint(0, config.vocab_size, (batch, seq_len))


def test_numel_equals_accounting_over_random_configs():
    rng = random.Random(1234)
    families, checked_dead = set(), {}
    for _ in range(200):
        config = random_config(rng)
        families.add((config.family, getattr(config, "resize", None)))
        model = build_model(config)
        trainable, frozen = count_params(model)
        acc = account(config)
        assert (trainable, frozen) == (acc.params_total, acc.params_frozen), config
        out = model(_inputs(config))
        if isinstance(config, VisionMLPConfig):
            assert out.shape == (2, config.d_out)
        else:
            assert model.config is config
            assert out.shape == (2, 8, config.vocab_size)
            # relu units can be dead on a tiny batch
            kind = (config.family, getattr(config, "resize", None))
            if config.activation != "relu" and checked_dead.get(kind, 0) < 12:
                checked_dead[kind] = checked_dead.get(kind, 0) + 1
                configure(model, config, TrainConfig())
                assert not _dead_weights(model, model(_inputs(config, 2, 16))), config
    assert len(families) == 6  # every family and every resize mode was drawn
    assert len(checked_dead) == 5 and min(checked_dead.values()) >= 6, checked_dead


def _lm_variants():
    base = {"d_model": 32, "n_layers": 3, "n_heads": 4, "vocab_size": 64}
    return [
        ConventionalConfig(**base, d_h=64, n_kv_heads=2, bias=True, tie_embeddings=False),
        ConventionalConfig(**base, d_h=64, activation="simple_gated", norm_order="post"),
        HourglassConfig(**base, d_h=8, k=3, norm_order="post"),
        VariableWidthConfig(**base, d_h=64, widths=[16, 48, 24], resize="carry"),
        VariableWidthConfig(**base, d_h=64, widths=[48, 16, 40], resize="zero"),
        VariableWidthConfig(**base, d_h=64, widths=[16, 48, 40], resize="projection"),
        # zero / projection with ends narrower than D: the embedding, final norm and head
        # shrink to the coordinates that are read (tied: the wider of the two ends).
        VariableWidthConfig(**base, d_h=64, widths=[16, 48, 24], resize="zero",
                            tie_embeddings=False),
        VariableWidthConfig(**base, d_h=64, widths=[24, 8, 16], resize="zero"),
        VariableWidthConfig(**base, d_h=64, widths=[8, 16, 24], resize="zero"),  # tied table 24
        VariableWidthConfig(**base, d_h=64, widths=[8, 48, 24], resize="projection",
                            tie_embeddings=False),
        VariableWidthConfig(**base, d_h=64, widths=[24, 48, 8], resize="projection"),
    ]


def _variant_id(c) -> str:
    widths = getattr(c, "widths", None)
    return f"{c.family}-{getattr(c, 'resize', '')}-{widths}-tied{c.tie_embeddings}"


@pytest.mark.parametrize("config", _lm_variants(), ids=_variant_id)
def test_causal_and_every_parameter_matters(config):
    torch.manual_seed(0)
    model = build_model(config)
    configure(model, config, TrainConfig())
    idx = torch.randint(0, config.vocab_size, (2, 12))
    changed = idx.clone()
    changed[:, 7] = (idx[:, 7] + 1) % config.vocab_size
    logits, logits_changed = model(idx), model(changed)
    torch.testing.assert_close(logits[:, :7], logits_changed[:, :7])
    assert not torch.allclose(logits[:, 7:], logits_changed[:, 7:])
    assert not _dead_weights(model, logits)


@pytest.mark.parametrize("resize", ["carry", "zero", "projection"])
@pytest.mark.parametrize("norm_order", ["pre", "post"])
def test_constant_variable_width_equals_conventional(resize, norm_order):
    shared = {"d_model": 32, "n_layers": 3, "n_heads": 4, "d_h": 64, "vocab_size": 64,
              "norm_order": norm_order, "tie_embeddings": False, "bias": True}
    conventional = ConventionalConfig(**shared)
    variable = VariableWidthConfig(**shared, widths=[32, 32, 32], resize=resize)
    torch.manual_seed(0)
    reference = build_model(conventional)
    configure(reference, conventional, TrainConfig())
    with torch.no_grad():  # make the zero-initialised biases matter too
        for p in reference.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model = build_model(variable)
    model.load_state_dict(reference.state_dict())
    idx = torch.randint(0, 64, (2, 10))
    torch.testing.assert_close(model(idx), reference(idx))


def _block_streams(model, idx):
    """The global residual stream entering and leaving each block."""
    seen = []
    hooks = [b.register_forward_hook(lambda m, args, out: seen.append((args[0], out)))
             for b in model.blocks]
    model(idx)
    for h in hooks:
        h.remove()
    return seen


def test_resize_semantics():
    """carry passes skipped coordinates through; zero and projection reset grown ones."""
    base = {"d_model": 32, "n_layers": 3, "n_heads": 4, "d_h": 64, "vocab_size": 64}
    idx = torch.randint(0, 64, (2, 6))
    torch.manual_seed(0)
    carry = build_model(VariableWidthConfig(**base, widths=[48, 16, 48], resize="carry"))
    (in0, out0), (in1, out1), (in2, _) = _block_streams(carry, idx)
    assert carry.stream_width == 48 and not in0[..., 32:].any()  # embedding fills [:D]
    torch.testing.assert_close(out1[..., 16:], in1[..., 16:])  # narrow layer skips them
    torch.testing.assert_close(in2, out1)  # and layer 2 reads them back
    assert out0[..., 16:].abs().sum() > 0

    zero = build_model(VariableWidthConfig(**base, widths=[48, 16, 48], resize="zero"))
    (_, out0), (in1, out1), (in2, _) = _block_streams(zero, idx)
    assert not in2[..., 16:48].any()
    torch.testing.assert_close(in2[..., :16], out1[..., :16])

    proj = build_model(VariableWidthConfig(**base, widths=[48, 16, 48], resize="projection"))
    (_, _), (_, out1), (in2, _) = _block_streams(proj, idx)
    expected = proj.resizers["2"](out1[..., :16])
    torch.testing.assert_close(in2[..., 16:48], expected)


def _measured_flops(model, inputs) -> int:
    # The math backend runs attention as plain matmuls over the full (masked) T x T
    # scores, which is the accounting's non-causal convention.
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(inputs).float().square().mean().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("config", [
    ConventionalConfig(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_h=256, vocab_size=256,
                       tie_embeddings=False),
    ConventionalConfig(d_model=48, n_layers=2, n_heads=2, d_h=96, activation="simple_gated"),
    HourglassConfig(d_model=64, n_layers=2, n_heads=4, d_h=16, k=3),
    VariableWidthConfig(d_model=64, n_layers=4, n_heads=4, d_h=256, resize="projection"),
    VisionMLPConfig(d_x=64, d_z=128, d_h=32, n_layers=3, input_projection="fixed"),
    VisionMLPConfig(d_x=64, d_z=128, d_h=32, n_layers=3, input_projection="trained"),
], ids=lambda c: f"{c.family}-{getattr(c, 'input_projection', c.activation)}")
def test_flops_match_accounting(config):
    seq_len, batch = 32, 2
    model = build_model(config)
    inputs = _inputs(config, batch, seq_len)
    examples = batch if isinstance(config, VisionMLPConfig) else batch * seq_len
    expected = account(config, seq_len).flops_per_token * examples
    assert _measured_flops(model, inputs) == pytest.approx(expected, rel=0.02)


def test_rotary_is_relative_and_grows():
    from shapesweep.trainers.lm import Rotary

    rope, small = Rotary(8), Rotary(8, max_len=4)
    q, k = torch.randn(8), torch.randn(8)
    seq = torch.zeros(1, 1, 12, 8)
    seq[..., 2, :], seq[..., 5, :] = q, k
    shifted = torch.zeros(1, 1, 12, 8)
    shifted[..., 6, :], shifted[..., 9, :] = q, k
    a, b = rope(seq), rope(shifted)
    # q.k after rotation depends only on the offset between positions (5-2 == 9-6)
    torch.testing.assert_close((a[0, 0, 2] * a[0, 0, 5]).sum(), (b[0, 0, 6] * b[0, 0, 9]).sum())
    torch.testing.assert_close(small(seq), a)  # tables rebuilt for a longer sequence
    model = build_model(VariableWidthConfig(d_model=32, n_layers=3, n_heads=4, d_h=64,
                                            widths=[16, 32, 16]))
    assert len(list(model.buffers())) == 2 * 2  # cos/sin per distinct head_dim, shared
    assert not any("rotary" in key for key in model.state_dict())
