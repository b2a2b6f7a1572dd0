"""A conventional candidate as a Hugging Face `LlamaForCausalLM`: config.json and weights.

The conventions, as `trainers/lm.py` and `trainers/ffn.py` implement them; the numbers
(head sizes, RoPE base, norm eps) are read at export time from the shapesweep model built
on the meta device, so this table documents them and the code never restates them:

| shapesweep (shapesweep.trainers.lm / ffn)                    | LlamaConfig / LlamaForCausalLM          |
|---------------------------------------------------|-----------------------------------------|
| d_model, n_layers, d_h, vocab_size                | hidden_size, num_hidden_layers, intermediate_size, vocab_size |
| n_heads; n_kv_heads (< n_heads: GQA)              | num_attention_heads; num_key_value_heads |
| head_dim (default d_model // n_heads, may differ) | head_dim                                |
| `Rotary`: rotate-half RoPE, base 10000            | rope_theta 10000, rope type default     |
| `nn.RMSNorm` with eps unset: finfo(float32).eps   | rms_norm_eps 1.1920929e-07              |
| attention scale 1/sqrt(head_dim), causal, no dropout | the same (Llama's eager and SDPA paths) |
| muP's `Attention.scale` (1/head_dim at the base width) | folded into the query rows (below)     |
| muP's `LM.output_mult` (logits x m)                | folded into the final norm's weight     |
| depth-muP's `Block.branch_mult` (pre-norm)        | folded into o_proj and down_proj        |
| swiglu: down(silu(gate) * up); geglu: exact gelu  | hidden_act silu; gelu                   |
| bias on every block matrix (never the readout)    | attention_bias and mlp_bias             |
| tie_embeddings (readout = wte.weight)             | tie_word_embeddings (lm_head absent)    |
| train.seq_len                                     | max_position_embeddings                 |
| no embedding scale, no dropout, pre-norm          | Llama's layout                          |

Weights (layer i; a fused matrix splits along its output rows in this order):

| shapesweep                 | Hugging Face                                        |
|----------------------------|-----------------------------------------------------|
| wte                        | model.embed_tokens                                  |
| blocks.i.attn_norm         | model.layers.i.input_layernorm                      |
| blocks.i.attn.qkv [q|k|v]  | model.layers.i.self_attn.{q,k,v}_proj               |
| blocks.i.attn.o            | model.layers.i.self_attn.o_proj                     |
| blocks.i.ffn_norm          | model.layers.i.post_attention_layernorm             |
| blocks.i.ffn.gate_up [gate|up] | model.layers.i.mlp.{gate,up}_proj               |
| blocks.i.ffn.down          | model.layers.i.mlp.down_proj                        |
| final_norm                 | model.norm                                          |
| lm_head (untied only)      | lm_head                                             |

Multipliers with no Llama setting are folded into the weights they follow (`folded`), so
the logits are the same and tied embeddings stay tied: each is linear in one weight.
logits x m = W (x_hat * (g * m)) puts muP's output multiplier m into the final RMSNorm's
gain g; an attention scale s in place of 1/sqrt(head_dim) is the query times
s * sqrt(head_dim) (RoPE is a rotation, so the factor passes through it), in the q rows of
`qkv` (weight and bias); a residual branch multiplier b (attention and FFN outputs x b
before each add) goes into `o` and the FFN's `down`. An export without weights is the
shape alone: a Llama trained from it is standard-parametrized, whatever `train.init` says.

Not expressible, so refused: hourglass (k residual sub-blocks with their own norms),
variable_width (per-layer widths), vision_mlp, post-norm (OLMo-2 order without its QK
norm), ungated relu/gelu FFNs and simple_gated (its residual alpha); `--format torch`
(`shapesweep.trainers.torch_export`) holds every language-model one. z-loss only shapes training.

Beside the weights: a tokenizer (`write_tokenizer`: the byte-level one the built-in corpus
and text sources are read with, ids = byte values, or the `tokenizer.json` the model was
trained with) and a generation config, so `pipeline("text-generation", model=FOLDER)` runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from shapesweep import common
from shapesweep.common import UserError
from shapesweep.families.base import of
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure
from shapesweep.trainers.state_names import HF

EXTRA = "pip install 'shapesweep[hf]'"
HIDDEN_ACT = {"swiglu": "silu", "geglu": "gelu"}  # gate activation of the gated FFN (ffn.ACTIVATIONS)



def require() -> None:
    """One line naming the extra when `transformers` or `safetensors` is missing."""
    common.require(("safetensors", "transformers"), EXTRA, key="--format hf")


def unsupported(model_config, train) -> str | None:
    """Why this candidate has no exact Llama equivalent, or None when it has one."""
    reason = _unsupported(model_config, train)
    return reason and f"{reason}; use --format torch (standalone PyTorch) or --format yaml"


def _unsupported(model_config, train) -> str | None:
    if "hf" not in of(model_config).exporters:  # a family with Llama's layout declares it
        return f"the {model_config.family} family has no standard architecture"
    if getattr(model_config, "n_experts", None):
        return "a mixture of experts is not Llama's dense FFN"
    if model_config.norm_order != "pre":
        return "post-norm (norm after each sub-layer) is not Llama's pre-norm"
    if model_config.activation not in HIDDEN_ACT:
        return (f"activation {model_config.activation} is not a gated FFN Llama can hold "
                f"(one of {', '.join(HIDDEN_ACT)})")
    return None


def _reference(model_config, train=None):
    """The shapesweep model on the meta device: its conventions, no memory; with `train`,
    initialised by its recipe too, so it holds the multipliers (muP's) training used."""

    with torch.device("meta"):
        model = build_model(model_config)
        if train is not None:
            configure(model, model_config, train)
    return model


def folded(state: dict[str, torch.Tensor], model) -> dict[str, torch.Tensor]:
    """`state` (shapesweep's names) with `model`'s multipliers folded into the weights they
    follow (see the module docstring): the output multiplier into `final_norm`, each
    attention scale into its query rows, each branch multiplier into `o` and `down`."""
    out = dict(state)

    def scale(name: str, factor: float, rows: int | None = None) -> None:
        if name not in state or factor == 1.0:
            return
        tensor = state[name].clone()
        tensor[:rows] *= factor  # rows None: the whole tensor
        out[name] = tensor

    scale("final_norm.weight", model.output_mult)
    for i, block in enumerate(model.blocks):
        attn = block.attn
        if attn.scale is not None:
            for param in ("weight", "bias"):
                scale(f"blocks.{i}.attn.qkv.{param}", attn.scale * math.sqrt(attn.head_dim),
                      rows=attn.q_dim)
        for module in ("attn.o", "ffn.down"):
            for param in ("weight", "bias"):
                scale(f"blocks.{i}.{module}.{param}", getattr(block, "branch_mult", 1.0))
    return out


def llama_config(model_config, train):
    """The `LlamaConfig` whose model computes what shapesweep's does."""
    from transformers import LlamaConfig

    model = _reference(model_config)
    attn = model.blocks[0].attn
    norm_eps = model.final_norm.eps  # None: torch uses finfo(dtype).eps; training is float32
    return LlamaConfig(
        vocab_size=model_config.vocab_size, hidden_size=model_config.d_model,
        intermediate_size=model_config.d_h, num_hidden_layers=model_config.n_layers,
        num_attention_heads=attn.n_heads, num_key_value_heads=attn.n_kv_heads,
        head_dim=attn.head_dim, hidden_act=HIDDEN_ACT[model_config.activation],
        max_position_embeddings=train.seq_len,
        rms_norm_eps=torch.finfo(torch.float32).eps if norm_eps is None else norm_eps,
        rope_theta=float(attn.rotary.base), attention_bias=model_config.bias,
        mlp_bias=model_config.bias, tie_word_embeddings=model_config.tie_embeddings,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,  # bytes or the user's tokenizer
    )


def llama_state_dict(state: dict[str, torch.Tensor], model_config) -> dict[str, torch.Tensor]:
    """shapesweep's LM state dict under Llama's names, fused matrices split."""
    attn = _reference(model_config).blocks[0].attn
    sizes = {"attn.qkv": [attn.q_dim, attn.kv_dim, attn.kv_dim],
             "ffn.gate_up": [model_config.d_h] * 2}
    return HF.convert(state, sizes)


def write_folder(folder, model_config, train, state: dict[str, torch.Tensor] | None) -> None:
    """config.json and generation_config.json (and model.safetensors, the multipliers
    folded in, when `state` is given) into an existing `folder`."""
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    llama_config(model_config, train).save_pretrained(str(folder))
    GenerationConfig(**generation_settings(train)).save_pretrained(str(folder))
    if state is not None:
        state = folded(state, _reference(model_config, train))
        save_file(llama_state_dict(state, model_config), str(folder / "model.safetensors"),
                  metadata={"format": "pt"})


def generation_settings(train) -> dict:
    """Sampling (greedy decoding of a small model repeats itself) up to a context of the
    length it was trained on; no end-of-text token: bytes have none."""
    return {"do_sample": True, "temperature": 0.8, "top_k": 50,
            "max_new_tokens": min(128, train.seq_len)}


def byte_tokenizer():
    """The tokenizer of byte-level data (`shapesweep.trainers.data`): token id = byte value,
    every byte sequence encodes and decodes exactly (GPT-2's byte-to-character table)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = bytes_to_unicode()
    tokenizer = Tokenizer(models.BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def read_tokenizer(path: str | None, key: str = "--tokenizer"):
    """`path`'s tokenizer.json, or the byte-level tokenizer when None; one line when unreadable."""
    from tokenizers import Tokenizer

    if path is None:
        return byte_tokenizer()
    if not Path(path).is_file():
        raise UserError("tokenizer file not found", file=path, key=key)
    try:
        return Tokenizer.from_file(path)
    except Exception as error:  # tokenizers raises a bare Exception for a bad file
        raise UserError(f"not a Hugging Face tokenizer.json ({error})", file=path,
                        key=key) from None


def check_vocab(tokenizer, vocab_size: int, path: str | None, key: str = "--tokenizer") -> None:
    """Refuse a tokenizer with ids the model has no embedding for."""
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        what = "byte-level data uses 256 ids" if path is None else f"it has {size} ids"
        raise UserError(f"{what}, more than the model's vocab_size={vocab_size} (give the "
                        "tokenizer.json it was trained with)", file=path, key=key)


def write_tokenizer(folder, tokenizer) -> None:
    """tokenizer.json and tokenizer_config.json, as `AutoTokenizer` reads them."""
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(str(folder))
