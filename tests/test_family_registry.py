"""A model family is one module: a family registered from this file alone plans, accounts
exactly, trains, and reaches the results store; the field lists follow the registry; the
package has no import cycle."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import Field, model_validator

from shapesweep.common import UserError
from shapesweep.families import base
from shapesweep.families.base import INTEGER, POSITIVE, Dim, FamilySpec, Stored
from shapesweep.families.counts import lm_account, uniform_totals
from shapesweep.families.lm import LayerShape, LMBase, uniform_shape
from shapesweep.results.schema import TRIAL_COLUMNS
from shapesweep.results.store import load_trials, write_trial
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import FAMILIES, make_config
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import parse_space
from shapesweep.sweep.driver.sweep_check import data_hash_for
from shapesweep.trainers.loop import train
from shapesweep.trainers.models import build_model, count_params

ROOT = Path(__file__).resolve().parent.parent


class WideFFNConfig(LMBase):
    """A toy family: the FFN is always `ffn_mult` x d_model wide (d_h is derived, not given)."""

    family: Literal["wide_ffn"] = "wide_ffn"
    d_h: Dim | None = None
    ffn_mult: Dim = 4

    @model_validator(mode="after")
    def _derive_d_h(self):
        wanted = self.ffn_mult * self.d_model
        if self.d_h not in (None, wanted):
            raise ValueError(f"d_h is ffn_mult * d_model = {wanted}, got {self.d_h}")
        object.__setattr__(self, "d_h", wanted)
        return self

    @staticmethod
    def block(c: Any) -> LayerShape:  # a config or the solver's namespace of arrays
        return dataclasses.replace(uniform_shape(c), d_h=c.ffn_mult * c.d_model)


TOY = FamilySpec(
    name="wide_ffn", config=WideFFNConfig, account=lm_account,
    vector_totals=lambda c, seq_len: uniform_totals(WideFFNConfig.block(c), c, seq_len),
    model="shapesweep.trainers.lm:LM",  # the standard LM, built from layer_shapes()
)
SPACE = {
    "name": "toy-wide-ffn", "family": "wide_ffn",
    "budget": {"non_embedding_params": 60_000, "tolerance": 0.1},
    "fixed": {"n_heads": 2, "vocab_size": 256, "ffn_mult": 3},
    "search": {"n_layers": [1, 2, 3]}, "solve": "d_model",
    "train": {"steps": 3, "seq_len": 16, "batch_tokens": 64, "eval_tokens": 256},
}


@pytest.fixture
def toy():
    base.register(TOY)
    yield TOY
    base.unregister(TOY.name)


def test_a_registered_family_is_known_everywhere_and_leaves_cleanly(toy):
    assert "wide_ffn" in FAMILIES and "ffn_mult" in INTEGER and "ffn_mult" in POSITIVE
    base.unregister("wide_ffn")
    assert "wide_ffn" not in FAMILIES and "ffn_mult" not in INTEGER
    base.register(TOY)


def test_the_toy_family_plans_accounts_and_trains(toy, one_torch_thread):
    space = parse_space(SPACE)
    candidates = plan(space).candidates
    assert sorted(c.config.n_layers for c in candidates) == [1, 2, 3]
    for c in candidates:
        assert c.config.family == "wide_ffn" and c.config.d_h == 3 * c.config.d_model
        assert abs(c.budget_error) <= 0.1
        assert count_params(build_model(c.config)) == (c.accounting.params_total, 0)
    result = train(candidates[0].config, space.train_for(candidate=candidates[0]))
    assert result.steps == 3 and result.val_loss > 0


def test_the_toy_familys_shape_reaches_a_stored_row(toy, tmp_path):
    config = make_config({"family": "wide_ffn", "d_model": 32, "n_layers": 2, "n_heads": 2})
    accounting = account(config, 16)
    row = {"sweep": "toy", "trial_id": "t0", "key": "k0", "family": "wide_ffn", "seed": 0,
           "status": "completed", "val_loss": 1.0,
           **{name: value for name, value in config.model_dump().items() if name in TRIAL_COLUMNS.names},
           **{name: getattr(accounting, name) for name in ("params_total", "params_non_embedding")}}
    write_trial(str(tmp_path), "toy", row, [])
    stored = load_trials(str(tmp_path)).iloc[0]
    assert (stored["family"], stored["d_model"], stored["n_layers"], stored["d_h"]) == ("wide_ffn", 32, 2, 128)
    assert stored["params_total"] == sum(p.numel() for p in build_model(config).parameters())


def test_a_sweep_checks_the_data_against_each_familys_own_vocab_default():
    """A space that sets no vocab_size is held to its family's default, not another's."""
    class Small(WideFFNConfig):
        family: Literal["small_vocab"] = "small_vocab"
        vocab_size: Annotated[int, Field(gt=0), Stored(hover=False)] = 128  # the bytes need 256

    base.register(dataclasses.replace(TOY, name="small_vocab", config=Small))
    try:
        space = parse_space({**SPACE, "family": "small_vocab",
                             "fixed": {k: v for k, v in SPACE["fixed"].items() if k != "vocab_size"}})
        with pytest.raises(UserError, match="vocab_size=128"):
            data_hash_for(space, None, None)
    finally:
        base.unregister("small_vocab")


def test_a_family_needs_its_own_family_literal_and_a_column_for_each_stored_field():
    with pytest.raises(ValueError, match="family"):
        base.register(dataclasses.replace(TOY, name="other"))

    class Unstorable(WideFFNConfig):
        family: Literal["unstorable"] = "unstorable"
        depth_mult: Annotated[int, Stored()] = 2

    with pytest.raises(ValueError, match=r"depth_mult.*before shapesweep.results.schema"):
        base.register(dataclasses.replace(TOY, name="unstorable", config=Unstorable))
    assert "unstorable" not in FAMILIES


def _imports(path: Path) -> set[str]:
    """The shapesweep modules a file imports at run time (`if TYPE_CHECKING:` blocks are types only)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shapesweep"):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("shapesweep")}
    return found


def _modules() -> dict[str, Path]:
    folders = {"shapesweep": "shapesweep", **{d: f"shapesweep.{d}" for d in
               ("sweep", "search_spaces", "trainers", "results", "dashboards")}}
    out = {}
    for folder, package in folders.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def _cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            if len(component) > 1:
                out.append(component)

    for v in edges:
        if v not in index:
            visit(v)
    return out


# Cycles left in code other changes own (their function-level imports); this list only shrinks.
KNOWN_CYCLES: list[set[str]] = []


def test_no_import_cycles_even_through_function_level_imports():
    modules = _modules()
    edges = {m: {n for n in _imports(path) if n in modules and n != m} for m, path in modules.items()}
    assert [c for c in _cycles(edges) if c not in KNOWN_CYCLES] == []


# docs/architecture.md: imports follow the data flow and never go back.
LOWER_LAYERS = {"shapesweep.trainers": ("shapesweep.sweep", "shapesweep.dashboards"),
                "shapesweep.search_spaces": ("shapesweep.sweep", "shapesweep.trainers",
                                             "shapesweep.dashboards"),
                "shapesweep.results": ("shapesweep.sweep", "shapesweep.dashboards"),
                # the driver runs what the command line parsed, and the options are declared
                # below both (sweep/options); the dashboards read the results store alone
                "shapesweep.sweep.driver": ("shapesweep.sweep.cli", "shapesweep.sweep.verbs",
                                            "shapesweep.sweep.slurm"),
                "shapesweep.sweep.options": ("shapesweep.sweep.cli", "shapesweep.sweep.verbs",
                                             "shapesweep.sweep.driver"),
                "shapesweep.dashboards": ("shapesweep.sweep",)}


# The recipe is the trainer's, and a space's `train:` block is one: the torch-free module that
# declares it sits below search_spaces.
BELOW_SEARCH_SPACES = ("shapesweep.trainers.recipe",)


def test_imports_never_go_back_up_the_data_flow():
    back = sorted((module, name) for module, path in _modules().items()
                  for layer, above in LOWER_LAYERS.items() if module.startswith(layer)
                  for name in _imports(path) if name.startswith(above)
                  and not name.startswith(BELOW_SEARCH_SPACES))
    assert back == []


FAMILY_PACKAGE = "shapesweep.families"
ABOVE_FAMILIES = tuple(f"shapesweep.{layer}" for layer in
                       ("sweep", "search_spaces", "trainers", "results", "dashboards"))


def test_families_sit_below_every_other_layer_and_the_registry_imports_no_family():
    """Family modules use only the registry (`base`) and the primitives beside it (`lm`,
    `counts`: LayerShape, the accounting arithmetic); those import no family module, and no
    family module imports another (the registry imports each, by name, from FAMILY_MODULES)."""
    modules = {m: p for m, p in _modules().items() if m.startswith(FAMILY_PACKAGE + ".")}
    assert set(base.FAMILY_MODULES) <= set(modules)
    up = sorted((m, n) for m, path in modules.items() for n in _imports(path) if n.startswith(ABOVE_FAMILIES))
    assert up == []
    sideways = sorted((m, n) for m, path in modules.items() for n in _imports(path)
                      if any(n == f or n.startswith(f + ".") for f in base.FAMILY_MODULES if f != m))
    assert sideways == []


# Family names that code outside shapesweep/families may still say, and why (none today).
FAMILY_LITERALS_ALLOWED: dict[tuple[str, str], int] = {}


def test_no_module_outside_the_families_names_a_family():
    """Which family is the baseline, which runs the analysis, which exports to Llama, what a
    label shows: each is its spec's field, so a family's name appears only in its module."""
    family_names = set(base.names())
    found: dict[tuple[str, str], int] = {}
    for module, path in _modules().items():
        if module.startswith(FAMILY_PACKAGE):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in family_names:
                found[module, node.value] = found.get((module, node.value), 0) + 1
    assert found == FAMILY_LITERALS_ALLOWED


TOY_MODULE = '''
from typing import Annotated, Literal

from shapesweep.families.base import Dim, FamilySpec, Stored
from shapesweep.families.counts import lm_account, uniform_totals
from shapesweep.families.lm import LMBase


class GroupedConfig(LMBase):
    family: Literal["grouped"] = "grouped"
    groups: Annotated[Dim, Stored()] = 1  # a knob of its own: recorded, labelled


SPEC = FamilySpec(
    name="grouped", config=GroupedConfig, account=lm_account,
    vector_totals=lambda c, seq_len: uniform_totals(GroupedConfig.block(c), c, seq_len),
    model="shapesweep.trainers.lm:LM", label_fields=("d_h", "groups"),
)
'''


def test_a_new_family_is_one_module_and_one_line_in_family_modules(tmp_path):
    """A module written anywhere plus its line in FAMILY_MODULES (made here before anything
    reads the registry, as the source line would be): it is registered last, its stored field
    is a result column and a solver field, a space plans with it, and status labels show it."""
    (tmp_path / "grouped_family.py").write_text(TOY_MODULE)
    code = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
from shapesweep.families import base
base.FAMILY_MODULES = (*base.FAMILY_MODULES, "grouped_family")  # the one line
from shapesweep.results.schema import TRIAL_COLUMNS
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import parse_space
from shapesweep.sweep.verbs.status_view import shape_label as _shape

assert base.names()[-1] == "grouped", base.names()
assert "groups" in TRIAL_COLUMNS.names and "groups" in base.INTEGER and "groups" in base.POSITIVE
space = parse_space({{"name": "grouped", "family": "grouped",
                      "budget": {{"non_embedding_params": 60_000, "tolerance": 0.1}},
                      "fixed": {{"n_heads": 2, "d_h": 64, "groups": 3}},
                      "search": {{"n_layers": [1, 2]}}, "solve": "d_model"}})
candidates = plan(space).candidates
assert [c.config.n_layers for c in candidates] == [1, 2], candidates
row = {{"family": "grouped", **candidates[0].config.model_dump()}}
assert _shape(row).endswith("d_h=64 groups=3"), _shape(row)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_every_module_imports_in_a_fresh_interpreter_and_planning_needs_no_torch():
    names = sorted(_modules())
    code = ("import importlib, sys\n"
            "import shapesweep.search_spaces.solver, shapesweep.results.schema, shapesweep.dashboards.report\n"
            "assert 'torch' not in sys.modules\n"
            f"for name in {names!r}: importlib.import_module(name)\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


PARALLEL_MODULE = '''
"""GPT-NeoX / PaLM's parallel block: attention and FFN read the same layer input (each through
its own norm) and both write the stream in one add. The family and its block, in one module."""
from typing import Literal

from torch import nn

from shapesweep.families.base import FamilySpec
from shapesweep.families.counts import lm_account, uniform_totals
from shapesweep.families.lm import LMBase
from shapesweep.trainers.ffn import make_ffn
from shapesweep.trainers.lm import Attention, LMBlock, _widen


class ParallelConfig(LMBase):
    family: Literal["parallel"] = "parallel"


class ParallelBlock(LMBlock):
    def __init__(self, s, rotary=None):
        super().__init__()
        self.width = int(s.width)
        self.attn, self.ffn = Attention(s, rotary), make_ffn(s)
        self.attn_norm, self.ffn_norm = nn.RMSNorm(self.width), nn.RMSNorm(self.width)
        self.n_branches, self.branch_mult = 2, 1.0  # residual writes; depth-muP's multiplier

    def set_branch_mult(self, mult):
        self.branch_mult = mult

    def forward(self, stream):
        x = stream[..., : self.width]
        h = self.attn(self.attn_norm(x)) + self.ffn(self.ffn_norm(x))
        return stream + _widen(h * self.branch_mult, stream.shape[-1])


SPEC = FamilySpec(
    name="parallel", config=ParallelConfig, account=lm_account,
    vector_totals=lambda c, seq_len: uniform_totals(ParallelConfig.block(c), c, seq_len),
    model="shapesweep.trainers.lm:LM", block="parallel_family:ParallelBlock",
)
'''
PARALLEL_RUN = '''
import json, subprocess, sys
from pathlib import Path

import numpy as np
import torch
import yaml
from safetensors.torch import load_file

tmp = Path(sys.argv[1])
sys.path.insert(0, str(tmp))
from shapesweep.families import base
base.FAMILY_MODULES = (*base.FAMILY_MODULES, "parallel_family")  # the one line

from shapesweep.results.store import write_trial
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import config_key
from shapesweep.search_spaces.solver import candidate_document, plan
from shapesweep.search_spaces.space import parse_space
from shapesweep.sweep.cli.main import main
from shapesweep.trainers.data import builtin_corpus
from shapesweep.trainers.models import build_model, count_params
from shapesweep.trainers.mup import configure

torch.set_num_threads(1)
space = parse_space({"name": "parallel", "family": "parallel",
                     "budget": {"non_embedding_params": 60_000, "tolerance": 0.1},
                     "fixed": {"n_heads": 2, "d_h": 64}, "search": {"n_layers": [1, 2]},
                     "solve": "d_model", "train": {"steps": 4, "seq_len": 32, "batch_tokens": 256,
                                                   "eval_tokens": 512, "lr": 1e-2}})
candidate = plan(space).candidates[-1]
config, recipe = candidate.config, space.train_for(candidate=candidate)
model = build_model(config)
assert [type(b).__name__ for b in model.blocks] == ["ParallelBlock"] * config.n_layers
assert count_params(model)[0] == account(config, recipe.seq_len).params_total  # exact
document = candidate_document(candidate, recipe)
(tmp / "candidate.yaml").write_text(yaml.safe_dump(document))
assert main(["train", str(tmp / "candidate.yaml"), "--save", str(tmp / "trained"), "--json"]) == 0
ours = build_model(config)
configure(ours, config, recipe)
ours.load_state_dict(load_file(tmp / "trained" / "model.safetensors"))
torch.manual_seed(recipe.seed)  # the loop's init, untrained
initial = build_model(config)
configure(initial, config, recipe)
assert not any(torch.equal(a, b) for a, b in zip(ours.state_dict().values(),
                                                 initial.state_dict().values()))  # trained
row = {"trial_id": "t0", "key": config_key(config), "family": "parallel", "seed": 0,
       "status": "completed", "val_loss": 2.0, "config_json": json.dumps(document),
       **account(config, seq_len=recipe.seq_len).to_dict()}
write_trial(str(tmp / "root"), "par", row, [])
export = ["export", "par", "--root", str(tmp / "root"), "--top", "1", "--weights",
          str(tmp / "trained")]
assert main([*export, "--format", "hf", "--out", str(tmp / "hf")]) == 2  # not declared
assert not (tmp / "hf").exists()
assert main([*export, "--format", "torch", "--out", str(tmp / "out")]) == 0
folder = tmp / "out" / "01-parallel"
tokens = torch.from_numpy(np.asarray(builtin_corpus().val[:96], dtype=np.int64)).view(2, 48)
np.save(tmp / "tokens.npy", tokens.numpy())
standalone = (
    "import sys, numpy, torch\\n"
    "sys.modules.update(shapesweep=None)\\n"  # any shapesweep import fails
    "sys.path.insert(0, sys.argv[1])\\n"
    "import model\\n"
    "net = model.load(sys.argv[1]).eval()\\n"
    "assert type(net.blocks[0]).__name__ == 'ParallelBlock'\\n"
    "with torch.no_grad():\\n"
    "    numpy.save(sys.argv[3], net(torch.from_numpy(numpy.load(sys.argv[2]))).numpy())\\n")
subprocess.run([sys.executable, "-c", standalone, str(folder), str(tmp / "tokens.npy"),
                str(tmp / "logits.npy")], check=True, cwd=tmp)
with torch.no_grad():
    expected = ours.eval()(tokens)
assert expected.std() > 0.1
torch.testing.assert_close(torch.from_numpy(np.load(tmp / "logits.npy")), expected, atol=1e-5,
                           rtol=0)
print("ok")
'''


@pytest.mark.slow  # trains and exports in fresh processes: 13 s quiet, the fast tier's fifth longest
def test_a_family_with_its_own_block_plans_trains_exports_and_reloads(tmp_path):
    """A parallel-block family (GPT-NeoX / PaLM) as one module and one FAMILY_MODULES line: it
    plans, counts exactly, trains on the built-in corpus, is refused by `--format hf` (which it
    does not declare) in one line, and its `--format torch` folder, its own block inside,
    reloads where shapesweep cannot be imported with the trained model's logits."""
    (tmp_path / "parallel_family.py").write_text(PARALLEL_MODULE)
    out = subprocess.run([sys.executable, "-c", PARALLEL_RUN, str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
    assert "has no --format hf export; use --format torch" in out.stderr
