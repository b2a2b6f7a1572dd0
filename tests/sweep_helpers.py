"""Small helpers the sweep tests share: a tiny conventional space and raw-row readers."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.dataset as ds
import yaml

from shapesweep.results.store import sweep_dir
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.cli.main import main as shapesweep

# Conventional LM, d_model 32: each depth gets the d_h that meets the budget.
TINY_TRAIN = {"tokens": 8192, "seq_len": 32, "batch_tokens": 512, "lr": 3.0e-3,
              "eval_tokens": 2048}
TINY_SPACE = {
    "name": "tiny-depths",
    "family": "conventional",
    "budget": {"non_embedding_params": 30912, "tolerance": 0.02},
    "fixed": {"d_model": 32, "n_heads": 2, "vocab_size": 256, "activation": "swiglu"},
    "search": {"n_layers": [1, 2, 3, 4]},
    "solve": "d_h",
    "train": TINY_TRAIN,
}
# A baseline and one deeper shape: the smallest comparison a sweep makes.
TWO_SHAPES = {
    "name": "two-shapes",
    "family": "conventional",
    "budget": {"non_embedding_params": 30912, "tolerance": 0.05},
    "fixed": {"d_model": 32, "n_heads": 2, "vocab_size": 256},
    "solve": "d_h",
    "variants": [{"name": "baseline", "fixed": {"n_layers": 2}},
                 {"name": "deep", "fixed": {"n_layers": 4}}],
    "train": TINY_TRAIN,
}
CHILD_ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def processes_naming(text: str) -> list[int]:
    """The processes whose command line holds `text` (what a test leaves behind)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def write_space(folder: Path, base: dict = TINY_SPACE, **changes) -> Path:
    """`base` with top-level keys replaced by `changes`, as FOLDER/NAME.yaml."""
    doc = {**base, **changes}
    path = folder / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def pairs(space_path: Path, seeds=(0,)) -> set[tuple[str, int]]:
    """Every (candidate key, seed) the sweep of this space must end with."""
    return {(c.key, s) for c in plan(load_space(space_path)).candidates for s in seeds}


def raw_trial_rows(root: Path, sweep: str):
    """Every row of every trials fragment on disk (no dedupe), to prove exactly-once."""
    folder = Path(sweep_dir(str(root), sweep)) / "trials"
    return ds.dataset(str(folder), format="parquet").to_table().to_pandas()


def run(*argv: str) -> int:
    """`shapesweep ARGV` in this process, without the live display for run/resume."""
    return shapesweep([*argv, "--no-progress"] if argv[0] in ("run", "resume") else list(argv))


def rendezvous(folder: Path) -> str:
    """A torch.distributed `init_method` through a file: no port to choose, so none that
    another test's process can take between its choice and rank 0's bind."""
    path = Path(folder) / "rendezvous"
    path.unlink(missing_ok=True)
    return f"file://{path}"
