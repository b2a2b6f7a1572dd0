"""A conventional candidate as a litgpt `GPT`: model_config.yaml and lit_model.pth.

litgpt's `Config` holds the same model `hf_export` maps onto Llama (its conventions are
listed there and read from the shapesweep model the same way); the litgpt names:

| shapesweep                                   | litgpt Config                                  |
|----------------------------------------------|------------------------------------------------|
| d_model, n_layers, d_h, vocab_size           | n_embd, n_layer, intermediate_size, vocab_size = padded_vocab_size |
| n_heads; n_kv_heads; head_dim                | n_head; n_query_groups; head_size              |
| pre-norm RMSNorm, eps finfo(float32).eps     | norm_class_name RMSNorm, norm_eps; parallel_residual False |
| RoPE on the whole head, base 10000           | rotary_percentage 1.0, rope_base               |
| swiglu; geglu (exact gelu)                   | mlp_class_name LLaMAMLP; GemmaMLP, gelu_approximate none |
| bias on every block matrix, never the readout | bias; lm_head_bias False                      |
| train.seq_len                                | block_size                                     |

Weights (layer i), a fused matrix split along its output rows:

| shapesweep                  | litgpt                                  |
|-----------------------------|-----------------------------------------|
| wte; final_norm; lm_head    | transformer.wte; transformer.ln_f; lm_head |
| blocks.i.attn_norm          | transformer.h.i.norm_1                  |
| blocks.i.attn.qkv [q|k|v]   | transformer.h.i.attn.qkv (the same layout) |
| blocks.i.attn.o             | transformer.h.i.attn.proj               |
| blocks.i.ffn_norm           | transformer.h.i.norm_2                  |
| blocks.i.ffn.gate_up [gate|up] | transformer.h.i.mlp.fc_1, fc_2       |
| blocks.i.ffn.down           | transformer.h.i.mlp.proj                |

Refused: what Llama refuses (`hf_export.unsupported`). muP's and depth-muP's multipliers
are folded into the weights as for Llama (`hf_export.folded`). litgpt's `lm_head` is always
a matrix of its own, so tied embeddings travel as two equal matrices.
"""

from __future__ import annotations

import torch

from shapesweep import common
from shapesweep.trainers import hf_export
from shapesweep.trainers.state_names import LITGPT

INSTALL = "pip install --no-deps litgpt && pip install lightning psutil"  # litgpt pins an old huggingface_hub
MLP_CLASS = {"swiglu": "LLaMAMLP", "geglu": "GemmaMLP"}



def require() -> None:
    """One line naming the install when litgpt is missing."""
    common.require(("litgpt",), INSTALL, key="--format litgpt")


def unsupported(model_config, train) -> str | None:
    """Why this candidate has no exact litgpt equivalent, or None when it has one."""
    return hf_export.unsupported(model_config, train)


def litgpt_config(model_config, train):
    """The litgpt `Config` whose `GPT` computes what shapesweep's model does."""
    from litgpt import Config

    model = hf_export._reference(model_config)
    attn = model.blocks[0].attn
    norm_eps = model.final_norm.eps  # None: torch uses finfo(dtype).eps; training is float32
    return Config(
        name="shapesweep", block_size=train.seq_len, vocab_size=model_config.vocab_size,
        padded_vocab_size=model_config.vocab_size, n_layer=model_config.n_layers,
        n_embd=model_config.d_model, n_head=attn.n_heads, n_query_groups=attn.n_kv_heads,
        head_size=attn.head_dim, rotary_percentage=1.0, rope_base=int(attn.rotary.base),
        parallel_residual=False, norm_class_name="RMSNorm",
        norm_eps=torch.finfo(torch.float32).eps if norm_eps is None else norm_eps,
        mlp_class_name=MLP_CLASS[model_config.activation], gelu_approximate="none",
        intermediate_size=model_config.d_h, bias=model_config.bias, lm_head_bias=False,
    )


def litgpt_state_dict(state: dict[str, torch.Tensor], model_config) -> dict[str, torch.Tensor]:
    """shapesweep's LM state dict under litgpt's names, the fused gate/up split."""
    out = LITGPT.convert(state, {"ffn.gate_up": [model_config.d_h] * 2})
    if model_config.tie_embeddings:  # litgpt's GPT always has its own lm_head: a copy
        out["lm_head.weight"] = out["transformer.wte.weight"].clone()
    return out


def write_folder(folder, model_config, train, state: dict[str, torch.Tensor] | None) -> None:
    """model_config.yaml (and lit_model.pth, the multipliers folded in, when `state` is given)
    into an existing `folder`."""
    from litgpt.utils import save_config

    save_config(litgpt_config(model_config, train), folder)
    if state is not None:
        state = hf_export.folded(state, hf_export._reference(model_config, train))
        torch.save(litgpt_state_dict(state, model_config), folder / "lit_model.pth")
