"""`plan` prices a sweep (issue 55.1) and says whether its seeds give a verdict (55.2)."""

import json

import pytest

from shapesweep.sweep.cli.main import main


def _plan(capsys, *flags):
    code = main(["plan", "demo-quick", "--format", "json", *flags])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else None), out.err


def test_price_per_candidate_scales_with_the_gpu_and_names_its_source(capsys):
    _, h100, err = _plan(capsys, "--gpu", "h100", "--gpus", "8", "--gpu-hour-price", "2")
    _, a100, _ = _plan(capsys, "--gpu", "a100")
    assert "GPU-hours on H100" in err and "on 8 GPUs" in err and "EAGER_MFU" in err
    for fast, slow in zip(h100, a100, strict=True):
        assert fast["train_flops"] == slow["train_flops"] > 0  # one accounting, any GPU
        assert slow["gpu_hours"] / fast["gpu_hours"] == pytest.approx(989 / 312, rel=0.01)
        assert fast["cost"] == pytest.approx(fast["gpu_hours"] * 2, abs=0.01)
        assert fast["trials"] == 7  # 4 lrs on 1 choice seed + 3 measure seeds


@pytest.mark.parametrize("flags", [["--gpu", "h10"], ["--gpus", "-1"], ["--gpu-hour-price", "-1"],
                                   ["--min-effect", "-0.1"]])
def test_bad_pricing_flags_are_one_line_exit_2(capsys, flags):
    code, _, err = _plan(capsys, *flags)
    assert code == 2 and err.count("\n") == 1 and flags[0] in err


def test_verdict_line_and_the_seeds_a_stated_effect_needs(capsys):
    _, _, err = _plan(capsys)
    assert "verdict: 3 measure seeds give one" in err
    _, _, err = _plan(capsys, "--seeds", "1")
    assert "verdict: none" in err and "--seeds 2" in err
    _, _, err = _plan(capsys, "--min-effect", "0.01", "--seed-sd", "0.02")
    assert "verdict: none" in err and "--no-verdict" in err
