"""Atomic training checkpoints: a crash mid-write never leaves a checkpoint half-written.

A checkpoint folder holds everything a resumed run needs to continue exactly where it
stopped: the weights as `model.safetensors` beside their `config.yaml` (so the folder is
also a `train --save` folder: `export --weights` reads it), and `checkpoint.pt` with the
rest, tensors and plain values only (read with `weights_only`, never running pickle):
optimizer state, the LR schedule position, the step (the data position: batches are a
pure function of seed and step), RNG states, the curve so far, and an identity (config
key + train recipe + data hash) so a checkpoint is never resumed into a different trial.
Each file is replaced atomically; the weights carry their step, so a crash between the two
replacements is caught on load instead of resuming mismatched weights and optimizer.

`train --save DIR` writes the trained model apart from that: `model.safetensors` (the
model's own state dict, loadable without running pickle) and `config.yaml` (the candidate
document `train` accepts), the pair `export --format hf --weights DIR` converts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import torch

from shapesweep.common import UserError
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.candidate_file import load_candidate
from shapesweep.search_spaces.solver import Candidate, candidate_document
from shapesweep.trainers.models import build_model

FILENAME = "checkpoint.pt"
WEIGHTS, CONFIG = "model.safetensors", "config.yaml"


def _atomic(path: Path, write) -> None:
    """`write(tmp)` then rename onto `path`: readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


class CheckpointState(TypedDict):
    """What `checkpoint.pt` holds beside the weights (the loop's `save`): tensors and plain
    values only."""

    identity: Mapping[str, object]  # config key + train recipe + data hash: the trial it is of
    optimizer: Mapping[str, object] | None  # its whole state dict (distributed.full_state)
    scheduler: Mapping[str, object]  # the LR schedule's state dict
    rng: RngState
    step: int  # steps done: the data position
    curve: Sequence[Mapping[str, object]]  # the evaluations so far
    loss_tail: Sequence[float]
    elapsed_s: float
    train_time_s: float


def save(directory: str | Path, weights: dict[str, torch.Tensor], model_config, train,
         state: CheckpointState) -> None:
    """The weights (`save_model`, tagged with `state['step']`), then the rest of `state`."""
    save_model(directory, weights, model_config, train, step=state["step"])
    _atomic(Path(directory) / FILENAME, lambda tmp: torch.save(state, tmp))


def saved_step(directory: str | Path) -> int | None:
    """The step a checkpoint folder's weights were saved at (read from the safetensors
    header alone), or None when it holds no checkpoint."""
    from safetensors import safe_open

    path = Path(directory) / WEIGHTS
    if not (path.is_file() and (Path(directory) / FILENAME).is_file()):
        return None
    with safe_open(str(path), "pt") as weights:
        step = (weights.metadata() or {}).get("step")
    return None if step is None else int(step)


def damage(directory: str | Path) -> str | None:
    """Why a checkpoint folder cannot be continued from (a file truncated or garbled, weights
    and state of different steps, no checkpoint at all), or None when it can. Reads the
    weights' header (safetensors checks it covers the file) and the state's index
    (memory-mapped), not the tensors: cheap enough to check each checkpoint of a trial."""
    folder = Path(directory)

    def first_line(error: Exception) -> str:
        text = str(error).strip().splitlines()
        return text[0] if text else type(error).__name__

    try:
        step = saved_step(folder)
    except Exception as error:  # noqa: BLE001 - header errors vary by damage
        return f"{WEIGHTS} cannot be read ({first_line(error)})"
    if step is None:
        return "no checkpoint in it"
    try:
        state = torch.load(folder / FILENAME, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # noqa: BLE001 - zip and pickle errors vary by damage
        return f"{FILENAME} cannot be read ({first_line(error)})"
    other = state.get("step") if isinstance(state, dict) else None
    if other != step:
        return f"weights are from step {step}, the rest from step {other}"
    return None


def check_save_dir(directory: str | Path | None) -> None:
    """Refuse a `--save` target that can never hold the model, before training starts."""
    if directory is None:
        return
    if Path(directory).exists() and not Path(directory).is_dir():
        raise UserError("exists and is not a folder", file=str(directory), key="--save")
    try:
        import safetensors  # noqa: F401
    except ImportError:
        raise UserError("needs safetensors (pip install 'shapesweep[hf]')", key="--save") from None


def save_model(directory: str | Path, weights: dict[str, torch.Tensor], model_config, train,
               step: int | None = None) -> None:
    """Write `weights` (the model's whole state dict) as `model.safetensors`, then
    `config.yaml` (each atomically), into `directory`; `step` (a checkpoint's) goes into the
    weights' metadata."""
    import yaml
    from safetensors.torch import save_file


    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    state = {name: t.detach().cpu().contiguous() for name, t in weights.items()}
    metadata = {"format": "pt"} | ({} if step is None else {"step": str(step)})
    _atomic(folder / WEIGHTS, lambda tmp: save_file(state, str(tmp), metadata=metadata))
    document = candidate_document(Candidate(model_config, account(model_config, train.seq_len), 0.0),
                                  train)
    _atomic(folder / CONFIG, lambda tmp: tmp.write_text(yaml.safe_dump(document, sort_keys=False)))


def load_model(directory: str | Path):
    """(model_config, TrainConfig, state dict) from a `train --save` folder; UserError if unusable."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file


    folder = Path(directory)
    if not folder.is_dir():
        raise UserError("no such folder (expected one written by `shapesweep train --save`)",
                        file=str(folder), key="--weights")
    for name in (CONFIG, WEIGHTS):
        if not (folder / name).is_file():
            raise UserError(f"no {name} (expected a folder written by `shapesweep train --save`)",
                            file=str(folder), key="--weights")
    model_config, train = load_candidate(folder / CONFIG)
    try:
        state = load_file(str(folder / WEIGHTS))
    except (SafetensorError, OSError) as error:
        raise UserError(f"cannot read weights ({error})", file=str(folder / WEIGHTS)) from error
    with torch.device("meta"):  # the expected names and shapes, without allocating the model
        expected = {n: tuple(t.shape) for n, t in build_model(model_config).state_dict().items()}
    found = {n: tuple(t.shape) for n, t in state.items()}
    if found != expected:
        wrong = sorted(set(found) ^ set(expected)) or sorted(n for n in found if found[n] != expected[n])
        raise UserError(f"does not match {CONFIG} (first difference: {wrong[0]})",
                        file=str(folder / WEIGHTS))
    return model_config, train, state


def saved_curve(directory: str | Path) -> list[dict[str, Any]]:
    """The evaluations a checkpoint has behind it (its state memory-mapped, not read whole)."""
    return torch.load(Path(directory) / FILENAME, map_location="cpu", weights_only=True,
                      mmap=True)["curve"]


def load(directory: str | Path | None, identity: Mapping[str, object],
         reread: Mapping[str, Callable[[object], object]] | None = None) -> dict[str, Any] | None:
    """The saved state if `directory` holds a checkpoint of this same trial, else None.
    `reread[key]` turns a saved identity value into what this version writes (a recipe
    re-validated, so a key added since with its default is the same trial)."""
    if directory is None:
        return None
    path = Path(directory) / FILENAME
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        step = saved_step(directory)
    except Exception as error:  # a foreign or corrupt file: pickle/zip/header errors vary
        raise UserError(f"cannot read checkpoint ({error})", file=str(path)) from error
    saved = state.get("identity", {})
    for key, value in identity.items():
        if _read_today(saved.get(key), (reread or {}).get(key)) != value:
            raise UserError(f"checkpoint belongs to a different trial ({key} differs); "
                            "use another --checkpoint-dir", file=str(path), key=key)
    if step != state["step"]:
        raise UserError(f"weights are from step {step}, the rest from step {state['step']} "
                        "(interrupted while saving); use another --checkpoint-dir", file=str(path))
    from safetensors.torch import load_file

    return state | {"model": load_file(str(Path(directory) / WEIGHTS))}


def _read_today(saved: object, reread: Callable[[object], object] | None) -> object:
    """A saved identity value as this version writes it (unchanged without `reread`, or if it
    no longer reads: it then differs)."""
    if reread is None or saved is None:
        return saved
    try:
        return reread(saved)
    except (TypeError, ValueError):  # pydantic's ValidationError is a ValueError
        return saved


# The generators a checkpoint restores: torch's CPU one, and each CUDA device's (a key named
# `torch` shadows the module in a class body, so the functional form).
RngState = TypedDict("RngState", {"torch": torch.Tensor, "cuda": list[torch.Tensor]}, total=False)  # noqa: UP013


def rng_state() -> RngState:
    state: RngState = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: RngState) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
