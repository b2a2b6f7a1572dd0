"""`export --format litgpt`: a conventional winner as litgpt's `GPT` (model_config.yaml and
lit_model.pth), from a sweep written through the real results store and weights from a real
`shapesweep train --save`. litgpt is installed with --no-deps (it pins an old huggingface_hub)."""

from __future__ import annotations

import pytest
import torch
from test_export_formats import (  # noqa: F401 - _one_thread is an autouse fixture
    BASE,
    MODELS,
    MUP,
    TRAIN,
    _export,
    _one_line_error,
    _one_thread,
    _sweep,
    _tokens,
    _train_saved,
    branch_scaled_mup_model,
)

from shapesweep.trainers import hf_export, litgpt_export
from shapesweep.trainers.litgpt_export import INSTALL

try:  # make setup installs it; missing is a failure, not a skip
    import litgpt
except ImportError:
    pytest.fail(f"litgpt is not installed ({INSTALL}; `make setup` does it)", pytrace=False)
UNTIED = {name: {**fields, "tie_embeddings": False} for name, fields in MODELS.items()}


def _gpt(folder):
    return litgpt.GPT(litgpt.Config.from_file(folder / "model_config.yaml"))


@pytest.mark.parametrize("name", sorted(UNTIED))
def test_model_config_builds_a_gpt_of_exactly_params_total(tmp_path, capsys, name):
    rows = _sweep(tmp_path / "root", [(UNTIED[name], {})])
    assert _export(tmp_path / "root", tmp_path / "out", format="litgpt") == 0
    folder = tmp_path / "out" / "01-conventional"
    assert capsys.readouterr().out.split() == [str(folder)]
    assert sorted(p.name for p in folder.iterdir()) == ["model_config.yaml", "shapesweep.yaml"]
    assert sum(p.numel() for p in _gpt(folder).parameters()) == rows[0]["params_total"]


@pytest.mark.parametrize("name", sorted(UNTIED))
def test_trained_weights_give_shapesweeps_logits(tmp_path, capsys, name):
    weights, ours = _train_saved(tmp_path, UNTIED[name])
    capsys.readouterr()
    _sweep(tmp_path / "root", [(UNTIED[name], {})])
    assert _export(tmp_path / "root", tmp_path / "out", "--weights", str(weights), format="litgpt") == 0
    folder = tmp_path / "out" / "01-conventional"
    theirs = _gpt(folder)
    theirs.load_state_dict(torch.load(folder / "lit_model.pth"), strict=True)  # every weight named
    tokens = _tokens()[:, :TRAIN["seq_len"]]  # litgpt refuses sequences beyond block_size (seq_len)
    with torch.no_grad():
        expected, got = ours.eval()(tokens), theirs.eval()(tokens)
    assert expected.std() > 0.1  # trained logits, not a constant both sides would agree on
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_tied_embeddings_become_a_copied_lm_head_with_the_same_logits(tmp_path, capsys):
    """litgpt's GPT cannot tie: the export unties (vocab x d_model more parameters), same logits."""
    weights, ours = _train_saved(tmp_path, MODELS["tied"])
    capsys.readouterr()
    rows = _sweep(tmp_path / "root", [(MODELS["tied"], {})])
    assert _export(tmp_path / "root", tmp_path / "out", "--weights", str(weights), format="litgpt") == 0
    folder = tmp_path / "out" / "01-conventional"
    theirs = _gpt(folder)
    extra = MODELS["tied"].get("vocab_size", 256) * MODELS["tied"]["d_model"]
    assert sum(p.numel() for p in theirs.parameters()) == rows[0]["params_total"] + extra
    theirs.load_state_dict(torch.load(folder / "lit_model.pth"), strict=True)
    tokens = _tokens()[:, :TRAIN["seq_len"]]
    with torch.no_grad():
        torch.testing.assert_close(theirs.eval()(tokens), ours.eval()(tokens), atol=1e-4, rtol=0)


def test_a_mup_model_exports_with_its_multipliers_folded_in(tmp_path, capsys):
    weights, ours = _train_saved(tmp_path, *MUP)
    assert ours.output_mult == 0.5 and ours.blocks[0].attn.scale is not None  # real muP
    capsys.readouterr()
    _sweep(tmp_path / "root", [MUP])
    assert _export(tmp_path / "root", tmp_path / "out", "--weights", str(weights), format="litgpt") == 0
    folder = tmp_path / "out" / "01-conventional"
    theirs = _gpt(folder)
    theirs.load_state_dict(torch.load(folder / "lit_model.pth"), strict=True)
    tokens = _tokens()[:, :TRAIN["seq_len"]]
    with torch.no_grad():
        expected = ours.eval()(tokens)
        assert expected.std() > 0.1
        torch.testing.assert_close(theirs.eval()(tokens), expected, atol=1e-5, rtol=0)


def test_branch_multipliers_fold_into_the_residual_writes():
    config, train, ours = branch_scaled_mup_model()
    theirs = litgpt.GPT(litgpt_export.litgpt_config(config, train)).eval()
    state = hf_export.folded(ours.state_dict(), ours)
    theirs.load_state_dict(litgpt_export.litgpt_state_dict(state, config), strict=True)
    tokens = _tokens()[:, :TRAIN["seq_len"]]
    with torch.no_grad():
        torch.testing.assert_close(theirs(tokens), ours(tokens), atol=1e-5, rtol=0)


def test_what_llama_refuses_exits_2_and_writes_nothing(tmp_path, capsys):
    _sweep(tmp_path / "root2", [(UNTIED["tied"], {}), ({**UNTIED["tied"], "activation": "relu"}, {})],
           name="winners")
    assert _export(tmp_path / "root2", tmp_path / "out", format="litgpt") == 2
    _one_line_error(capsys, "activation relu", "--format torch")
    assert not (tmp_path / "out").exists()
