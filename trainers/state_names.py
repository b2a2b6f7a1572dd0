"""The one state-dict name map of the exports: shapesweep's LM parameter names -> Llama's
(`hf_export`) and litgpt's (`litgpt_export`). Each format's `StateDictAdapter` is a column of
`LAYER_NAMES` and `END_NAMES`, so the two cannot disagree on which matrix a block holds; a
fused matrix (`attn.qkv`, `ffn.gate_up`) is split along its output rows where a format keeps
its parts apart (Llama's q/k/v, both formats' gate/up) and kept whole where it fuses them too
(litgpt's qkv, the same [q|k|v] layout).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

Format = Literal["hf", "litgpt"]

# block submodule -> per format, the modules its rows split into, in order
LAYER_NAMES: dict[str, dict[Format, tuple[str, ...]]] = {
    "attn_norm": {"hf": ("input_layernorm",), "litgpt": ("norm_1",)},
    "attn.qkv": {"hf": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                 "litgpt": ("attn.qkv",)},
    "attn.o": {"hf": ("self_attn.o_proj",), "litgpt": ("attn.proj",)},
    "ffn_norm": {"hf": ("post_attention_layernorm",), "litgpt": ("norm_2",)},
    "ffn.gate_up": {"hf": ("mlp.gate_proj", "mlp.up_proj"), "litgpt": ("mlp.fc_1", "mlp.fc_2")},
    "ffn.down": {"hf": ("mlp.down_proj",), "litgpt": ("mlp.proj",)},
}
# the modules outside the blocks -> per format, its module
END_NAMES: dict[str, dict[Format, str]] = {
    "wte": {"hf": "model.embed_tokens", "litgpt": "transformer.wte"},
    "final_norm": {"hf": "model.norm", "litgpt": "transformer.ln_f"},
    "lm_head": {"hf": "lm_head", "litgpt": "lm_head"},
}
# where each format keeps block i's modules
LAYER_PREFIX: dict[Format, str] = {"hf": "model.layers", "litgpt": "transformer.h"}


@dataclass(frozen=True)
class StateDictAdapter:
    """One format's names for shapesweep's LM state dict (its column of the map above)."""

    layer_prefix: str
    layers: Mapping[str, tuple[str, ...]]
    ends: Mapping[str, str]

    @classmethod
    def of(cls, format: Format) -> StateDictAdapter:
        return cls(LAYER_PREFIX[format], {local: names[format] for local, names in LAYER_NAMES.items()},
                   {module: names[format] for module, names in END_NAMES.items()})

    def convert(self, state: Mapping[str, torch.Tensor],
                row_sizes: Mapping[str, Sequence[int]]) -> dict[str, torch.Tensor]:
        """`state` under this format's names; a fused block matrix this format splits is cut
        into parts of `row_sizes[local]` rows (e.g. [q, kv, kv] for `attn.qkv`)."""
        out = {}
        for name, tensor in state.items():
            module, param = name.rsplit(".", 1)
            if module in self.ends:
                out[f"{self.ends[module]}.{param}"] = tensor
                continue
            _, layer, local = module.split(".", 2)  # blocks.<i>.<local>
            targets = self.layers[local]
            parts = tensor.split(list(row_sizes[local])) if len(targets) > 1 else [tensor]
            for target, part in zip(targets, parts, strict=True):
                out[f"{self.layer_prefix}.{layer}.{target}.{param}"] = part.contiguous()
        return out


HF = StateDictAdapter.of("hf")
LITGPT = StateDictAdapter.of("litgpt")
