"""Atomic training checkpoints: a crash mid-write never leaves a checkpoint half-written.

One file, `checkpoint.pt`, holds everything a resumed run needs to continue exactly
where it stopped: model and optimizer state, the LR schedule position, the step (the
data position: batches are a pure function of seed and step), RNG states, the curve
so far, and an identity (config key + train recipe + data hash) so a checkpoint is
never resumed into a different trial.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from search_spaces.errors import UserError

FILENAME = "checkpoint.pt"


def save(directory: str | Path, state: dict[str, Any]) -> None:
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{FILENAME}.{os.getpid()}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, folder / FILENAME)


def load(directory: str | Path | None, identity: dict[str, Any]) -> dict[str, Any] | None:
    """The saved state if `directory` holds a checkpoint of this same trial, else None."""
    if directory is None:
        return None
    path = Path(directory) / FILENAME
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # a foreign or corrupt file: pickle/zip errors vary
        raise UserError(f"cannot read checkpoint ({error})", file=str(path)) from error
    saved = state.get("identity", {})
    for key, value in identity.items():
        if saved.get(key) != value:
            raise UserError(f"checkpoint belongs to a different trial ({key} differs); "
                            "use another --checkpoint-dir", file=str(path), key=key)
    return state


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
