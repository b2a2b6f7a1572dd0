"""Any language-model family as one standalone PyTorch file: what `--format hf` cannot hold.

`model.py` is shapesweep's own model code (`trainers/ffn.py`, `trainers/moe.py`, `trainers/lm.py` and
`LayerShape`, and the family's own block class when it has one: `FamilySpec.block`, whose code
may use what those modules define), copied verbatim at export time so it cannot drift from what
was trained,
with the shapesweep imports replaced by `config.json`: the solved per-layer shapes, the
embedding/readout widths and muP's multipliers. It needs only torch (and
safetensors for weights), and reads a `train --save` model.safetensors unchanged: the
parameter names are shapesweep's.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import asdict

import torch
from pydantic import BaseModel

from shapesweep import common
from shapesweep.families.base import load, of
from shapesweep.families.lm import LayerShape
from shapesweep.trainers import ffn, lm, moe
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure
from shapesweep.trainers.recipe import TrainConfig

OWN_IMPORTS = re.compile(r"^(from shapesweep[. ].*|from __future__ import annotations)\n", re.MULTILINE)
HEADER = '''"""Standalone shapesweep language model, written by `shapesweep export --format torch`.

    import model; net = model.load("FOLDER")   # config.json (+ model.safetensors if present)
    logits = net(token_ids)                      # [B, T] -> [B, T, vocab_size]

The code below is shapesweep's trainers/ffn.py, trainers/moe.py and trainers/lm.py, unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


'''
TAIL = '''

# --- the config shapesweep would pass, read from config.json ------------------------------------


class ResolvedConfig:
    """config.json's fields, and the per-layer shapes `LM` asks a config for."""

    def __init__(self, fields: dict):
        self.__dict__.update(fields)

    def layer_shapes(self) -> list[LayerShape]:
        return [LayerShape(**layer) for layer in self.layers]


def end_widths(config, widths):
    """Embedding columns and readout coordinates, as shapesweep solved them."""
    return config.embed_in, config.readout


def load(folder: str | Path = ".") -> LM:
    """The model config.json describes, with model.safetensors' weights when the folder has them."""
    folder = Path(folder)
    config = ResolvedConfig(json.loads((folder / "config.json").read_text()))
    model = LM(config, block=BLOCK)
    model.output_mult = config.output_mult
    for block, scale in zip(model.blocks, config.attention_scales, strict=True):
        block.attn.scale = scale
    for block, mult in zip(model.blocks, config.branch_mults, strict=True):
        block.set_branch_mult(mult)
    if (folder / "model.safetensors").exists():
        from safetensors.torch import load_file

        model.load_state_dict(load_file(str(folder / "model.safetensors")))
    return model
'''


def require() -> None:
    """Weights travel as safetensors (the `hf` extra)."""
    common.require(("safetensors",), "pip install 'shapesweep[hf]'", key="--format torch")


def unsupported(model_config: BaseModel, train: TrainConfig) -> str | None:
    """Every language-model family (each declares this format) is its own code."""
    return None


def source(model_config: BaseModel | None = None) -> str:
    """model.py: the model modules' source without their shapesweep imports, and the block
    class of `model_config`'s family (`lm.Block` by default) as `BLOCK`."""
    name = of(model_config).block if model_config is not None else None
    block = load(name) if name else lm.Block
    parts = [inspect.getsource(LayerShape)]
    parts += [OWN_IMPORTS.sub("", inspect.getsource(module)) for module in (ffn, moe, lm)]
    if block is not lm.Block:
        parts.append(inspect.getsource(block))
    return HEADER + "\n\n".join(parts) + f"\n\n\nBLOCK = {block.__name__}  # the family's block\n" + TAIL


def resolved(model_config, train) -> dict:
    """config.json: what `LM` reads from a config, and what muP sets after building it."""
    with torch.device("meta"):  # the real shapes and multipliers, no memory
        model = build_model(model_config)
        if not isinstance(model, lm.LM):  # what every family that declares this format builds
            raise TypeError(f"--format torch writes shapesweep's LM, not a {type(model).__name__}")
        configure(model, model_config, train)
    return {
        "family": model_config.family, "d_model": model.d_model, "resize": model.resize,
        "vocab_size": model_config.vocab_size, "tie_embeddings": model_config.tie_embeddings,
        "bias": model_config.bias, "embed_in": model.embed_in, "readout": model.readout,
        "layers": [asdict(s) for s in model_config.layer_shapes()],
        "output_mult": model.output_mult,
        "attention_scales": [block.attn.scale for block in model.blocks],
        "branch_mults": [block.branch_mult for block in model.blocks],  # depth-muP's
    }


def write_folder(folder, model_config, train, state: dict[str, torch.Tensor] | None) -> None:
    """model.py and config.json (and the weights, under shapesweep's names) into `folder`."""
    from safetensors.torch import save_file

    (folder / "model.py").write_text(source(model_config))
    (folder / "config.json").write_text(json.dumps(resolved(model_config, train), indent=2,
                                                   default=int) + "\n")
    if state is not None:
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
