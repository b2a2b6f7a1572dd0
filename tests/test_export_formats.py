"""`export --format hf|torch`: a winner as a Hugging Face `LlamaForCausalLM` (conventional
family) or as a standalone PyTorch file (any language-model family).

The sweep to export from is written through the real results store (no Ray); the
weights come from a real `shapesweep train CONFIG --steps 3 --save DIR`.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoConfig, LlamaForCausalLM

from shapesweep.results.store import write_trial
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.candidate_file import load_candidate
from shapesweep.search_spaces.configs import TrainConfig, config_key, make_config
from shapesweep.sweep.cli.main import main
from shapesweep.trainers.checkpoint import save_model
from shapesweep.trainers.data import builtin_corpus
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure

TRAIN = dict(steps=3, seq_len=32, batch_tokens=256, eval_tokens=512, lr=1e-2)
BASE = dict(family="conventional", d_model=32, n_layers=2, n_heads=2, d_h=96)
MODELS = {  # every Llama setting a conventional candidate can reach
    "tied": BASE,
    "untied-gqa": {**BASE, "n_heads": 4, "n_kv_heads": 2, "tie_embeddings": False},
    "bias-geglu-head_dim": {**BASE, "head_dim": 8, "d_h": 64, "bias": True, "activation": "geglu"},
}
REFUSED = {  # what no standard architecture holds, and the words that say why
    "hourglass": ({"family": "hourglass", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_h": 16,
                   "k": 2}, {}, "hourglass family"),
    "variable_width": ({**BASE, "family": "variable_width", "n_layers": 3, "alpha": 0.5}, {},
                       "variable_width family"),
    "vision_mlp": ({"family": "vision_mlp", "d_z": 32, "d_h": 64, "n_layers": 2}, {},
                   "vision_mlp family"),
    "post-norm": ({**BASE, "norm_order": "post"}, {}, "post-norm"),
    "relu": ({**BASE, "activation": "relu"}, {}, "activation relu"),
    "simple_gated": ({**BASE, "activation": "simple_gated"}, {}, "activation simple_gated"),
    "moe": ({**BASE, "n_experts": 4, "n_active_experts": 2}, {}, "mixture of experts"),
}
STANDALONE = {  # (fields, train overrides) that only the standalone PyTorch export holds
    "hourglass-post-norm": (REFUSED["hourglass"][0] | {"norm_order": "post"}, {}),
    "variable_width-projection": (REFUSED["variable_width"][0] | {"resize": "projection",
                                                                 "shape": "grow"}, {}),
    "conventional-mup": (BASE, {"parametrization": "mup", "mup_base_width": 16}),
    "hourglass-depth-mup": (REFUSED["hourglass"][0], {"init": "mup", "depth_mup": True,
                                                      "mup_base_depth": 1}),
    "variable_width-moe": (REFUSED["variable_width"][0] | {"n_experts": 3, "n_active_experts": 2}, {}),
}
MUP = (BASE, {"init": "mup", "mup_base_width": 16})  # muP at width 32, twice its base
# Runs model.py where shapesweep cannot be imported, and saves its logits for `tokens.npy`.
RUN_STANDALONE = """
import sys, numpy, torch
sys.modules.update(shapesweep=None)  # any shapesweep import fails
sys.path.insert(0, sys.argv[1])
import model
net = model.load(sys.argv[1]).eval()
with torch.no_grad():
    logits = net(torch.from_numpy(numpy.load(sys.argv[2])))
numpy.save(sys.argv[3], logits.numpy())
"""


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs on one torch thread (see conftest)."""


def _document(fields: dict, train: dict | None = None) -> dict:
    config = make_config(fields)
    return {"family": config.family, "model": config.model_dump(mode="json", exclude={"family"}),
            "train": {**TRAIN, **(train or {})}}


def _sweep(root, models: list[tuple[dict, dict]], name: str = "winners") -> list[dict]:
    """A completed trial per (fields, train overrides), ranked in the given order."""
    rows = []
    for rank, (fields, train) in enumerate(models):
        config = make_config(fields)
        row = {"trial_id": f"t{rank}", "key": config_key(config), "family": config.family,
               "seed": 0, "status": "completed", "val_loss": 2.0 + rank,
               "config_json": _document(fields, train),
               **account(config, seq_len=TRAIN["seq_len"]).to_dict()}
        write_trial(root, name, row, [])
        rows.append(row)
    return rows


def _export(root, out, *extra, format="hf") -> int:
    return main(["export", "winners", "--root", str(root), "--top", "2", "--format", format,
                 "--out", str(out), *extra])


def _tokens() -> torch.Tensor:
    """Two rows of real validation text."""
    return torch.from_numpy(np.asarray(builtin_corpus().val[:2 * 48], dtype=np.int64)).view(2, 48)


def _train_saved(tmp_path, fields: dict, train: dict | None = None):
    """`shapesweep train CONFIG --steps 3 --save DIR`; returns DIR and the trained model."""
    candidate, weights = tmp_path / "candidate.yaml", tmp_path / "trained"
    candidate.write_text(yaml.safe_dump(_document(fields, train)))
    assert main(["train", str(candidate), "--steps", "3", "--save", str(weights), "--json"]) == 0
    config, recipe = load_candidate(candidate)
    model = build_model(config)
    configure(model, config, recipe)  # muP's multipliers live on the model, not in its weights
    model.load_state_dict(load_file(weights / "model.safetensors"))
    return weights, model


def _one_line_error(capsys, *words) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err
    return err


@pytest.mark.parametrize("format", ["yaml", "json"])
def test_file_formats_are_candidates_train_reads(tmp_path, capsys, format):
    rows = _sweep(tmp_path / "root", [(BASE, {}), (REFUSED["hourglass"][0], {})])
    assert _export(tmp_path / "root", tmp_path / "out", format=format) == 0
    paths = [tmp_path / "out" / f"0{r}-{row['family']}.{format}"
             for r, row in enumerate(rows, 1)]
    assert capsys.readouterr().out.split() == [str(p) for p in paths]
    assert [config_key(load_candidate(p)[0]) for p in paths] == [row["key"] for row in rows]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_config_json_builds_a_llama_of_exactly_params_total(tmp_path, capsys, name):
    rows = _sweep(tmp_path / "root", [(MODELS[name], {})])
    assert _export(tmp_path / "root", tmp_path / "out") == 0
    folder = tmp_path / "out" / "01-conventional"
    assert capsys.readouterr().out.split() == [str(folder)]
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json", "generation_config.json", "shapesweep.yaml", "tokenizer.json",
        "tokenizer_config.json"]
    llama = LlamaForCausalLM(AutoConfig.from_pretrained(folder))
    assert sum(p.numel() for p in llama.parameters()) == rows[0]["params_total"]
    assert (llama.lm_head.weight is llama.model.embed_tokens.weight) == MODELS[name].get(
        "tie_embeddings", True)
    config, _ = load_candidate(folder / "shapesweep.yaml")  # beside it: what `train` reads
    assert config_key(config) == rows[0]["key"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_trained_weights_give_shapesweeps_logits(tmp_path, capsys, name):
    weights, ours = _train_saved(tmp_path, MODELS[name])
    capsys.readouterr()
    other = {**BASE, "d_h": 64}  # ranked second, exported without weights
    rows = _sweep(tmp_path / "root", [(MODELS[name], {}), (other, {})])
    assert _export(tmp_path / "root", tmp_path / "out", "--weights", str(weights)) == 0
    folders = [tmp_path / "out" / f"0{r}-conventional" for r, row in enumerate(rows, 1)]
    assert capsys.readouterr().out.split() == [str(f) for f in folders]
    assert not (folders[1] / "model.safetensors").exists()

    theirs, info = LlamaForCausalLM.from_pretrained(folders[0], output_loading_info=True)
    assert not any(info.values()), info  # every weight named, none left over
    with torch.no_grad():
        expected, got = ours.eval()(_tokens()), theirs.eval()(_tokens()).logits
    assert expected.std() > 0.1  # trained logits, not a constant both sides would agree on
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_a_mup_model_exports_with_its_multipliers_folded_in(tmp_path, capsys):
    """muP's logit multiplier and 1/head_dim attention scale have no Llama setting: folded
    into the final norm and the query rows, the logits stay equal and the embeddings tied."""
    weights, ours = _train_saved(tmp_path, *MUP)
    assert ours.output_mult == 0.5 and ours.blocks[0].attn.scale is not None  # real muP
    capsys.readouterr()
    _sweep(tmp_path / "root", [MUP])
    assert _export(tmp_path / "root", tmp_path / "out", "--weights", str(weights)) == 0
    theirs, info = LlamaForCausalLM.from_pretrained(
        tmp_path / "out" / "01-conventional", output_loading_info=True)
    assert not any(info.values()), info
    assert theirs.config.tie_word_embeddings
    assert theirs.lm_head.weight is theirs.model.embed_tokens.weight  # one tensor, tied
    with torch.no_grad():
        expected, got = ours.eval()(_tokens()), theirs.eval()(_tokens()).logits
    assert expected.std() > 0.1
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def branch_scaled_mup_model(mult: float = 0.5):
    """A muP model (BASE at twice its base width) whose blocks scale each residual write by
    `mult` (depth-muP's `Block.branch_mult`), with random weights away from their init."""
    config, train = make_config(MUP[0]), TrainConfig(**TRAIN, **MUP[1])
    torch.manual_seed(0)
    model = build_model(config)
    configure(model, config, train)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.2)
    for block in model.blocks:
        block.branch_mult = mult
    return config, train, model.eval()


def test_branch_multipliers_fold_into_the_residual_writes():
    from shapesweep.trainers import hf_export

    config, train, ours = branch_scaled_mup_model()
    theirs = LlamaForCausalLM(hf_export.llama_config(config, train)).eval()
    state = hf_export.folded(ours.state_dict(), ours)
    loaded = theirs.load_state_dict(hf_export.llama_state_dict(state, config), strict=False)
    assert loaded.missing_keys == ["lm_head.weight"] and not loaded.unexpected_keys  # tied
    with torch.no_grad():
        expected = ours(_tokens())
        torch.testing.assert_close(theirs(_tokens()).logits, expected, atol=1e-5, rtol=0)
        for block in ours.blocks:  # the multiplier matters: without it the logits differ
            block.branch_mult = 1.0
        assert (ours(_tokens()) - expected).abs().max() > 1e-2


@pytest.mark.parametrize("name", sorted(STANDALONE))
def test_standalone_torch_file_gives_shapesweeps_logits(tmp_path, capsys, name):
    fields, train = STANDALONE[name]
    weights, ours = _train_saved(tmp_path, fields, train)
    capsys.readouterr()
    rows = _sweep(tmp_path / "root", [(fields, train)])
    assert _export(tmp_path / "root", tmp_path / "out", "--weights", str(weights),
                   format="torch") == 0
    folder = tmp_path / "out" / f"01-{rows[0]['family']}"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json", "model.py", "model.safetensors", "shapesweep.yaml"]
    np.save(tmp_path / "tokens.npy", _tokens().numpy())
    subprocess.run([sys.executable, "-c", RUN_STANDALONE, str(folder), str(tmp_path / "tokens.npy"),
                    str(tmp_path / "logits.npy")], check=True, cwd=tmp_path)
    with torch.no_grad():
        expected = ours.eval()(_tokens())
    assert expected.std() > 0.1
    torch.testing.assert_close(torch.from_numpy(np.load(tmp_path / "logits.npy")), expected,
                               atol=1e-5, rtol=0)


def test_the_hf_folder_generates_text_through_a_pipeline_offline(tmp_path, capsys, monkeypatch):
    """A byte-level tokenizer (ids = bytes, as the model read its data) and a generation
    config beside the weights: transformers' own pipeline runs on the folder, nothing fetched."""
    from transformers import AutoTokenizer, pipeline

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    weights, _ = _train_saved(tmp_path, BASE)
    _sweep(tmp_path / "root", [(BASE, {})])
    assert _export(tmp_path / "root", tmp_path / "out", "--weights", str(weights)) == 0
    folder = tmp_path / "out" / "01-conventional"
    text = "def f(x):\n    return 'héllo' \u2192 x\n"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer(text)["input_ids"] == list(text.encode())
    assert tokenizer.decode(list(text.encode())) == text
    generate = pipeline("text-generation", model=str(folder))
    (out,) = generate("def main(", max_new_tokens=8)
    assert out["generated_text"].startswith("def main(") and len(out["generated_text"]) > 9


def _bpe_tokenizer(path, vocab_size: int):
    """A real BPE tokenizer.json trained on the built-in corpus' first bytes."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    text = bytes(builtin_corpus().train[:20_000]).decode("utf-8", errors="replace")
    tokenizer.train_from_iterator([text], trainers.BpeTrainer(vocab_size=vocab_size,
                                                              special_tokens=["[UNK]"]))
    tokenizer.save(str(path))
    return tokenizer


def test_export_carries_the_tokenizer_json_it_is_given(tmp_path, capsys):
    from transformers import AutoTokenizer

    ours = _bpe_tokenizer(tmp_path / "tokenizer.json", 200)
    _sweep(tmp_path / "root", [(BASE, {})])
    assert _export(tmp_path / "root", tmp_path / "out", "--tokenizer",
                   str(tmp_path / "tokenizer.json")) == 0
    theirs = AutoTokenizer.from_pretrained(tmp_path / "out" / "01-conventional")
    text = "for key, value in items.items():"
    assert theirs(text)["input_ids"] == ours.encode(text).ids != list(text.encode())


def test_a_tokenizer_the_model_cannot_hold_exits_2_and_writes_nothing(tmp_path, capsys):
    _bpe_tokenizer(tmp_path / "big.json", 300)  # more ids than vocab_size 256
    _sweep(tmp_path / "root", [(BASE, {})])
    assert _export(tmp_path / "root", tmp_path / "out", "--tokenizer",
                   str(tmp_path / "big.json")) == 2
    _one_line_error(capsys, "big.json", "--tokenizer", "300 ids", "vocab_size=256")
    assert _export(tmp_path / "root", tmp_path / "out", "--tokenizer", str(tmp_path / "nope")) == 2
    _one_line_error(capsys, "nope", "--tokenizer", "not found")
    assert _export(tmp_path / "root", tmp_path / "out", "--tokenizer", str(tmp_path / "big.json"),
                   format="torch") == 2
    _one_line_error(capsys, "--tokenizer", "only with --format hf")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unsupported_configs_exit_2_and_write_nothing(tmp_path, capsys, name):
    fields, train, why = REFUSED[name]
    _sweep(tmp_path / "root", [(BASE, {}), (fields, train)])
    assert _export(tmp_path / "root", tmp_path / "out") == 2
    _one_line_error(capsys, why, "--format yaml")
    assert not (tmp_path / "out").exists()


def test_weights_folder_problems_exit_2_and_write_nothing(tmp_path, capsys):
    _sweep(tmp_path / "root", [(BASE, {})])
    assert _export(tmp_path / "root", tmp_path / "out", "--weights", str(tmp_path / "missing")) == 2
    _one_line_error(capsys, "missing", "--weights", "train --save")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.yaml").write_text(yaml.safe_dump(_document(BASE)))
    assert _export(tmp_path / "root", tmp_path / "out", "--weights", str(tmp_path / "half")) == 2
    _one_line_error(capsys, "no model.safetensors")
    assert main(["export", "winners", "--root", str(tmp_path / "root"), "--top", "1",
                 "--out", str(tmp_path / "out"), "--weights", str(tmp_path / "half")]) == 2
    _one_line_error(capsys, "--weights", "only with --format hf")
    assert not (tmp_path / "out").exists()


def test_weights_of_a_config_not_exported_exit_2(tmp_path, capsys):
    """The weights folder's own shape decides where its weights go; a stranger is refused."""
    stranger = make_config({**BASE, "d_h": 64})
    save_model(tmp_path / "w", build_model(stranger).state_dict(), stranger, TrainConfig(**TRAIN))
    _sweep(tmp_path / "root", [(BASE, {})])
    assert _export(tmp_path / "root", tmp_path / "out", "--weights", str(tmp_path / "w")) == 2
    _one_line_error(capsys, "not among the 1 exported")
    assert not (tmp_path / "out").exists()


def test_missing_transformers_names_the_extra(tmp_path, capsys, monkeypatch):
    _sweep(tmp_path / "root", [(BASE, {})])
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    assert _export(tmp_path / "root", tmp_path / "out") == 2
    _one_line_error(capsys, "transformers", "pip install 'shapesweep[hf]'")
    assert not (tmp_path / "out").exists()


def test_train_save_onto_a_file_exits_2_before_training(tmp_path, capsys):
    candidate, target = tmp_path / "candidate.yaml", tmp_path / "a-file"
    candidate.write_text(yaml.safe_dump(_document(BASE)))
    target.write_text("not a folder")
    assert main(["train", str(candidate), "--save", str(target)]) == 2
    _one_line_error(capsys, "a-file", "--save", "not a folder")
