"""Hostile and absurd input through the real `shapesweep` entry point: nothing runs code,
nothing hangs, nothing is written; each is one line `file: key: problem` and exit 2."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from shapesweep.common import UserError
from shapesweep.search_spaces.expressions import ExpressionError, compile_expression
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.cli.main import main
from tests.sweep_helpers import TINY_SPACE, TINY_TRAIN, write_space

MARKER = "PWNED"  # the file a payload would create



HANG_S = 120  # a hang guard only: timings on a shared machine say nothing about a regression


@contextlib.contextmanager
def bounded(mib: float | None):
    """The block allocates at most `mib` MiB of Python memory at its peak (tracemalloc; None:
    unmeasured, tracing makes a 200,000-token YAML scan 20x slower) and ends within HANG_S:
    what a YAML bomb or an expanded range blows through, measured as work rather than as
    wall time, which a busy machine stretches."""
    if mib is not None:
        tracemalloc.start()
    start = time.perf_counter()
    try:
        yield
    finally:
        peak = tracemalloc.get_traced_memory()[1] if mib is not None else 0
        tracemalloc.stop()
    assert mib is None or peak < mib * 2**20, f"peak Python allocation {peak / 2**20:.0f} MiB"
    assert time.perf_counter() - start < HANG_S

def shapesweep(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def files_under(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def assert_refused(code: int, err: str, file: str | Path, key: str | None, problem: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert str(file) in lines[0] and problem in lines[0], lines[0]
    if key is not None:
        assert f": {key}: " in lines[0], lines[0]


def marker_payloads(folder: Path) -> dict[str, str]:
    marker = folder / MARKER
    return {
        "numpy writes a file": f"np.savetxt('{marker}', [1]) is None",
        "object graph escape": "().__class__.__base__.__subclasses__() != 0",
        "shell through numpy": f"np.testing._private.utils.os.system('touch {marker}') == 0",
        "import": f"__import__('os').system('touch {marker}') == 0",
        "lambda": "(lambda: 1)() == 1",
        "subscript": "d_model[0] > 1",
        "comprehension": "[x for x in d_model] != 0",
        "f-string": "f'{d_model}' == 'x'",
        "unknown name": "width > 3",
    }


PROBLEMS = {"numpy writes a file": "only these functions", "object graph escape": "only these functions",
            "shell through numpy": "only these functions", "import": "only these functions",
            "lambda": "only these functions", "subscript": "Subscript is not allowed",
            "comprehension": "ListComp is not allowed", "f-string": "JoinedStr is not allowed",
            "unknown name": "unknown name 'width'"}


@pytest.mark.parametrize("case", sorted(PROBLEMS))
def test_plan_refuses_constraint_payloads_at_load(capsys, tmp_path, case):
    expr = marker_payloads(tmp_path)[case]
    path = write_space(tmp_path, constraints=[expr])
    before = files_under(tmp_path)
    code, out, err = shapesweep(capsys, "plan", str(path), "--out", str(tmp_path / "cands"))
    assert_refused(code, err, path, "constraints[0]", PROBLEMS[case])
    assert out == "" and files_under(tmp_path) == before
    assert not (tmp_path / MARKER).exists()


def test_a_variants_constraint_is_named_by_its_own_key(capsys, tmp_path):
    variants = [{"name": "a"}, {"name": "b", "constraints": ["n_layers > 1", "n_layers.real > 1"]}]
    path = write_space(tmp_path, variants=variants)
    code, _, err = shapesweep(capsys, "plan", str(path))
    assert_refused(code, err, path, "variants[1].constraints[1]", "Attribute is not allowed")


def test_a_huge_constant_exponent_is_refused_fast_in_a_fresh_process(tmp_path):
    """`9**9**9` hung the solver; a subprocess with a timeout fails a regression, not hangs it."""
    path = write_space(tmp_path, constraints=["9**9**9 > 0"])
    result = subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", "plan", str(path)],
                            capture_output=True, text=True, timeout=HANG_S,
                            cwd=Path(__file__).resolve().parents[1])
    assert_refused(result.returncode, result.stderr, path, "constraints[0]", "exponent")
    assert result.stdout == ""


def test_column_exponents_overflow_instead_of_hanging(capsys, tmp_path):
    path = write_space(tmp_path, constraints=["d_model ** d_model ** n_layers > 0"])
    with bounded(mib=100):
        code, out, err = shapesweep(capsys, "plan", str(path), "--format", "json")
    assert code == 0, err
    assert len(json.loads(out)) == 4  # inf > 0 holds: the constraint keeps every depth


def test_constraints_keep_their_language():
    """What constraints may say: columns, numbers, arithmetic, chained comparisons, and/or/not,
    the named functions, and text compared with a categorical column."""
    names = {"d_model", "n_layers", "task", "bias"}
    columns = {"d_model": np.array([64.0, 128, 256]), "n_layers": np.array([2, 3, 4]),
               "task": "denoise", "bias": False}
    cases = {
        "n_layers % 2 == 0 and d_model > 100": [False, False, True],
        "1 < n_layers < 4": [True, True, False],
        "not (d_model // 64 == 2) or bias": [True, False, True],
        "min(d_model, 100) == 100 and log2(d_model) >= 7": [False, True, True],
        "task == 'denoise' and -n_layers < -2": [False, True, True],
        "sqrt(d_model * d_model) == d_model and abs(-n_layers) == n_layers": [True, True, True],
    }
    for text, expected in cases.items():
        assert compile_expression(text, names).evaluate(columns, 3).tolist() == expected, text
    for text in ("d_model.real > 0", "min(d_model) > 0", "round(d_model, 2) > 0", "max > 0",
                 "d_model if bias else 1", "'x' * 3 == task", "d_model @ d_model", "2 ** 65 > 0",
                 "x" * 2000, "((((((d_model))))))" * 100, "d_model >"):
        with pytest.raises(ExpressionError):
            compile_expression(text, names)


def _bomb(levels: int = 9) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _space_text(**changes) -> str:
    return yaml.safe_dump({**TINY_SPACE, **changes}, sort_keys=False)


YAML_CASES = {
    "not utf-8": (_space_text().encode() + b"description: caf\xe9\n", None, "not UTF-8"),
    "duplicate top-level key": (_space_text() + "name: again\n", "name", "duplicate key"),
    "duplicate nested key": (_space_text().replace("  d_model: 32", "  d_model: 32\n  d_model: 64")
                             .encode(), "fixed.d_model", "duplicate key"),
    "alias bomb in budget.match": (
        (_bomb() + _space_text(budget={"match": {"family": "conventional"}})
         .replace("family: conventional\n    ", "family: conventional\n    extra: *l8\n    ", 1)).encode(),
        None, "aliases"),
    "merge key": (_space_text() + "defaults: &d {a: 1}\nother:\n  <<: *d\n", None, "aliases"),
    "over 1 MiB": (_space_text() + "description: '" + "x" * (1 << 20) + "'\n", None, "limit"),
    "nested too deeply": (_space_text() + "description: " + "[" * 100_000 + "]" * 100_000 + "\n",
                          None, "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(YAML_CASES))
def test_plan_refuses_bad_yaml_quickly(capsys, tmp_path, case):
    text, key, problem = YAML_CASES[case]
    path = tmp_path / "space.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with bounded(mib=100 if "bomb" in case else None):  # the alias bomb took 34 s and 1.3 GB
        code, out, err = shapesweep(capsys, "plan", str(path))
    assert_refused(code, err, path, key, problem)
    assert out == ""


def test_yaml_reader_bounds_alias_expansion_before_building(tmp_path):
    """The bomb is refused while composing, so even ten levels cost nothing."""
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(10) + "name: x\n")
    with bounded(mib=20), pytest.raises(UserError, match="aliases"):
        load_space(path)


BAD_FIELDS = {
    "no seeds": ({"seeds": []}, "seeds", "at least one seed"),
    "negative seed": ({"seeds": [0, -1]}, "seeds", "[0, 2**32)"),
    "duplicate seeds": ({"seeds": [3, 1, 3]}, "seeds", "given twice"),
    "negative tokens": ({"train": {**TINY_SPACE["train"], "tokens": -5}}, "train.tokens", "greater than 0"),
    "zero steps": ({"train": {"steps": 0}}, "train.steps", "greater than 0"),
    "zero batch_tokens": ({"train": {**TINY_SPACE["train"], "batch_tokens": 0}}, "train.batch_tokens",
                          "greater than 0"),
    "batch_tokens below a sequence": ({"train": {**TINY_SPACE["train"], "batch_tokens": 16}}, "train",
                                      "less than one sequence"),
    "negative eval_tokens": ({"train": {**TINY_SPACE["train"], "eval_tokens": -1}},
                             "train.eval_tokens", "greater than 0"),
    "absurd tokens": ({"train": {**TINY_SPACE["train"], "tokens": "1e18"}}, "train.tokens", "less than"),
    "no training budget": ({"train": {"seq_len": 32, "batch_tokens": 512}}, "train", "train.tokens or train.steps"),
    "cooldown_frac above a half": ({"train": {**TINY_SPACE["train"], "decay": "wsd", "cooldown_frac": 0.6}},
                                   "train.cooldown_frac", "less than or equal to 0.5"),
    "cooldown_frac 0": ({"train": {**TINY_SPACE["train"], "decay": "wsd", "cooldown_frac": 0}},
                        "train.cooldown_frac", "greater than 0"),
    "cooldown evaluations under cosine": ({"train": {**TINY_SPACE["train"], "cooldown_evals": "rungs"}},
                                          "train", "need decay: wsd"),
    "no train block": ({"train": None}, "train", None),
    "vocab_size 1e12": ({"fixed": {**TINY_SPACE["fixed"], "vocab_size": 1e12}}, "fixed.vocab_size", "at most"),
    "d_model 2**21": ({"fixed": {**TINY_SPACE["fixed"], "d_model": 2**21}}, "fixed.d_model", "at most"),
    "searched n_layers 1e7": ({"search": {"n_layers": [1, 10_000_000]}}, "search.n_layers", "at most"),
    "nan ratio": ({"fixed": {**TINY_SPACE["fixed"], "ffn_ratio": float("nan")}, "solve": []},
                  "fixed.ffn_ratio", "must be a finite number"),
    "infinite budget": ({"budget": {"non_embedding_params": float("inf")}}, "budget", "positive number"),
    "range of 1e9 points": ({"search": {"n_layers": {"min": 1, "max": 1e9, "num": 1e9}}}, "search.n_layers",
                            "the limit is"),
    "infinite range": ({"search": {"n_layers": {"min": 1, "max": float("inf"), "step": 1}}},
                       "search.n_layers.max", "finite"),
    "raw grid of 1e18": ({"search": {"n_layers": {"min": 1, "max": 1e6, "num": 1e6},
                                     "n_heads": {"min": 1, "max": 1e6, "num": 1e6},
                                     "vocab_size": {"min": 1, "max": 1e6, "num": 1e6}}},
                         "search", "raw points is too many"),
}


@pytest.mark.parametrize("case", sorted(BAD_FIELDS))
def test_plan_refuses_absurd_counts_and_seeds(capsys, tmp_path, case):
    changes, key, problem = BAD_FIELDS[case]
    doc = {**TINY_SPACE, **changes}
    doc = {k: v for k, v in doc.items() if v is not None}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with bounded(mib=100):  # a 1e9-point range allocated 7.5 GiB first
        code, out, err = shapesweep(capsys, "plan", str(path))
    assert_refused(code, err, path, key, problem or "")
    assert out == ""


RUN_CASES = {
    "payload in a constraint": lambda folder: (
        write_space(folder, constraints=[f"np.savetxt('{folder / MARKER}', [1]) is None"]), []),
    "no training budget": lambda folder: (
        write_space(folder, train={"seq_len": 32, "batch_tokens": 512}), []),
    "no seeds in the space": lambda folder: (write_space(folder, seeds=[]), []),
    "--seeds 0,,1": lambda folder: (write_space(folder), ["--seeds", "0,,1"]),
    "--seeds with a duplicate": lambda folder: (write_space(folder), ["--seeds", "2,2"]),
    # Ray would wait forever for resources the local cluster does not have
    "more CPUs per trial than the machine": lambda folder: (write_space(folder), ["--cpus-per-trial", "100000"]),
    "negative GPUs per trial": lambda folder: (write_space(folder), ["--gpus-per-trial", "-1"]),
    "a noise-aware ASHA with one seed": lambda folder: (write_space(folder), ["--scheduler", "asha"]),
}
FLAG_OF = {"more CPUs per trial than the machine": "--cpus-per-trial", "negative GPUs per trial": "--gpus-per-trial",
           "a noise-aware ASHA with one seed": "--scheduler"}


@pytest.mark.parametrize("case", sorted(RUN_CASES))
def test_run_refuses_before_any_sweep_state_exists(capsys, tmp_path, case):
    """Refused before the catalog, the sweep folder or Ray exists."""
    space, extra = RUN_CASES[case](tmp_path)
    root = tmp_path / "root"
    code, _, err = shapesweep(capsys, "run", str(space), "--root", str(root), "--no-progress", *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f": {FLAG_OF.get(case, '--seeds')}: " in err if extra else str(space) in err
    assert not root.exists()
    assert not (tmp_path / MARKER).exists()


def test_resume_refuses_an_edited_saved_space_before_running_it(capsys, tmp_path):
    """A root written the way runner writes one (sweep.json + space.yaml), whose space.yaml
    was then edited to carry a payload: resume refuses it and runs nothing."""
    from shapesweep.results.store import sweep_dir, write_sweep_file
    from shapesweep.sweep.driver.runner import OPTIONS_FILE, SPACE_FILE, SweepOptions

    root, name = tmp_path / "root", TINY_SPACE["name"]
    saved = f"{sweep_dir(str(root), name)}/{SPACE_FILE}"
    options = SweepOptions(space=saved, name=name, root=str(root))
    write_sweep_file(str(root), name, OPTIONS_FILE, json.dumps(options.__dict__))
    marker = tmp_path / MARKER
    hostile = {**TINY_SPACE, "constraints": [f"np.testing._private.utils.os.system('touch {marker}') == 0"]}
    write_sweep_file(str(root), name, SPACE_FILE, yaml.safe_dump(hostile, sort_keys=False))
    before = files_under(root)
    code, _, err = shapesweep(capsys, "resume", name, "--root", str(root), "--no-progress")
    assert_refused(code, err, saved, "constraints[0]", "only these functions")
    assert not marker.exists()
    assert files_under(root) == before  # no catalog database, no Ray folder


def _candidate(folder: Path, model: dict, train: dict | None = None, family: str = "conventional") -> Path:
    path = folder / "candidate.yaml"
    train = train or {"steps": 2, "seq_len": 32, "batch_tokens": 64, "eval_tokens": 64}
    path.write_text(yaml.safe_dump({"family": family, "model": model, "train": train}))
    return path


TINY_MODEL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_h": 64}


@pytest.mark.parametrize("device", ["tpu", "cuda:99"] + ([] if torch.cuda.is_available() else ["cuda"]))
def test_train_refuses_a_device_this_machine_lacks_before_any_work(capsys, tmp_path, device):
    path = _candidate(tmp_path, TINY_MODEL)
    code, out, err = shapesweep(capsys, "train", str(path), "--device", device, "--save", str(tmp_path / "out"))
    assert_refused(code, err, f"'{device}'", "--device", "")
    assert out == "" and not (tmp_path / "out").exists()


def test_train_refuses_a_model_too_large_to_allocate(capsys, tmp_path):
    """d_model 1e6 died inside torch's allocator; now the accounting refuses it first."""
    path = _candidate(tmp_path, {**TINY_MODEL, "d_model": 1_000_000})
    with bounded(mib=100):  # torch's own allocations are not traced: the message says who refused
        code, out, err = shapesweep(capsys, "train", str(path), "--device", "cpu", "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert ": model: conventional candidate " in err and "GiB to train" in err and out == ""


def test_memory_check_counts_states_and_points_at_micro_batches():
    from shapesweep.search_spaces.accounting import account
    from shapesweep.search_spaces.configs import TrainConfig, make_config
    from shapesweep.trainers.memory import ADAM_STATES, check_fits, estimate

    config = make_config({"family": "conventional", **TINY_MODEL})
    train = TrainConfig(steps=1, seq_len=32, batch_tokens=64)
    assert estimate(config, train, "cpu").total > ADAM_STATES * account(config, 32).params_total
    check_fits(config, train, "cpu")  # a tiny model fits
    # 33M parameters fit; logits of 2**20 tokens x 2**22 words at once cannot, one sequence can
    wide_vocab = make_config({"family": "conventional", **TINY_MODEL, "vocab_size": 2**22})
    whole = TrainConfig(steps=1, seq_len=32, batch_tokens=2**20)
    with pytest.raises(UserError, match="micro_batch_size may fit"):
        check_fits(wide_vocab, whole, "cpu")
    check_fits(wide_vocab, whole.model_copy(update={"micro_batch_size": 1}), "cpu")


CANDIDATE_CASES = {
    "a search space": (lambda folder: write_space(folder), None, "this is a search space"),
    "not utf-8": (lambda folder: _write(folder, b"family: conventional\nmodel: {d_model: 3\xff}\n"),
                  None, "not UTF-8"),
    "duplicate model key": (lambda folder: _write(
        folder, b"family: conventional\nmodel: {d_model: 32, d_model: 64, n_layers: 1, n_heads: 2, d_h: 8}\n"),
        "model.d_model", "duplicate key"),
    "alias": (lambda folder: _write(folder, b"family: conventional\nm: &m {d_model: 32}\nmodel: *m\n"),
              None, "aliases"),
    "zero batch_tokens": (lambda folder: _candidate(folder, TINY_MODEL, {"steps": 2, "batch_tokens": 0}),
                          "train.batch_tokens", "greater than 0"),
    "vocab_size 1e12": (lambda folder: _candidate(folder, {**TINY_MODEL, "vocab_size": 10**12}),
                        "model.vocab_size", "less than or equal"),
}


def _write(folder: Path, data: bytes) -> Path:
    path = folder / "candidate.yaml"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", sorted(CANDIDATE_CASES))
def test_train_refuses_bad_candidate_files(capsys, tmp_path, case):
    make, key, problem = CANDIDATE_CASES[case]
    path = make(tmp_path)
    before = files_under(tmp_path)
    code, out, err = shapesweep(capsys, "train", str(path), "--device", "cpu")
    assert_refused(code, err, path, key, problem)
    assert out == "" and files_under(tmp_path) == before


def test_train_refuses_an_absurd_token_flag(capsys, tmp_path):
    path = _candidate(tmp_path, TINY_MODEL)
    code, _, err = shapesweep(capsys, "train", str(path), "--tokens", "1e18")
    assert_refused(code, err, "--tokens", "--tokens", "less than or equal")


def test_export_and_status_of_a_missing_sweep_name_it_and_create_nothing(capsys, tmp_path):
    root = tmp_path / "sweeps"
    for verb, extra in (("export", ["--top", "1", "--out", str(tmp_path / "out")]), ("status", [])):
        code, _, err = shapesweep(capsys, verb, "nosuch", "--root", str(root), *extra)
        assert_refused(code, err, "nosuch", "name", f"no sweep named 'nosuch' under {root}")
    assert sorted(tmp_path.iterdir()) == []  # no root, no catalog, no export folder


# ---------------------------------------------------------------- issue 24: tracebacks owed one line

CONSTRAINT_ERRORS = {
    "a constant beyond float64": ("d_model ** 1" + "0" * 400 + " > 0", "beyond float64"),  # OverflowError
    "text compared with a number": ("d_model ** ('a' < 1) > 0", "can only be compared with a column"),
    "text compared with a sum": ("n_layers + 1 == 'x'", "can only be compared with a column"),
}


@pytest.mark.parametrize("case", sorted(CONSTRAINT_ERRORS))
def test_plan_refuses_constraints_that_cannot_be_evaluated(capsys, tmp_path, case):
    expr, problem = CONSTRAINT_ERRORS[case]
    path = write_space(tmp_path, constraints=[expr])
    code, out, err = shapesweep(capsys, "plan", str(path))
    assert_refused(code, err, path, "constraints[0]", problem)
    assert out == ""


CONTROL_BYTES = {"NUL in a value": (b"name: tiny\x00depths\n", "U+0000 at line 1, column 11"),
                 "escape at a line's start": (b"\x1b[31m: 1\n", "U+001B at line 1, column 1")}


@pytest.mark.parametrize("case", sorted(CONTROL_BYTES))
@pytest.mark.parametrize("verb", ["plan", "train"])
def test_a_control_byte_in_any_yaml_is_one_line(capsys, tmp_path, case, verb):
    """PyYAML's reader raised on these before the guarded parse: a traceback from every verb."""
    data, problem = CONTROL_BYTES[case]
    source = write_space(tmp_path) if verb == "plan" else _candidate(tmp_path, TINY_MODEL)
    path = tmp_path / "input.yaml"
    path.write_bytes(data + source.read_bytes())
    code, out, err = shapesweep(capsys, verb, str(path), *(["--device", "cpu"] if verb == "train" else []))
    assert_refused(code, err, path, None, problem)
    assert out == ""


MISSING_FIELDS = {
    "hourglass solving [d_model, n_layers] without d_h": (
        {"family": "hourglass", "fixed": {"n_heads": 2, "width_depth_ratio": 16}, "search": {},
         "solve": ["d_model", "n_layers"]}, "fixed", "hourglass needs a value for d_h"),
    "no n_heads": ({"fixed": {"d_model": 32}}, "fixed", "conventional needs a value for n_heads: fix it or search it"),
    "a variant without d_model": ({"fixed": {"n_heads": 2}, "variants": [{"name": "a", "fixed": {"d_model": 32}},
                                                                       {"name": "b"}]},
                                  "variants[1].fixed", "needs a value for d_model"),
}


@pytest.mark.parametrize("case", sorted(MISSING_FIELDS))
def test_plan_names_a_field_no_candidate_has(capsys, tmp_path, case):
    changes, key, problem = MISSING_FIELDS[case]
    path = write_space(tmp_path, **changes)
    code, out, err = shapesweep(capsys, "plan", str(path))
    assert_refused(code, err, path, key, problem)
    assert out == ""


NOT_A_NUMBER = {
    "n_layers": ({"search": {"n_layers": [1, "two"]}}, "search.n_layers", "cannot read 'two'"),
    "router_aux_loss": ({"fixed": {**TINY_SPACE["fixed"], "n_experts": 4, "n_active_experts": 2},
                         "search": {"n_layers": [1, 2], "router_aux_loss": [0.01, "x"]}},
                        "search.router_aux_loss", "cannot read 'x'"),
    "beta": ({"family": "variable_width", "solve": [], "fixed": {"n_heads": 2, "d_model": 32, "n_layers": 4, "d_h": 64},
              "search": {"beta": [0.5, "x"]}}, "search.beta", "cannot read 'x'"),
    "beta above 1": ({"family": "variable_width", "solve": [],
                      "fixed": {"n_heads": 2, "d_model": 32, "n_layers": 4, "d_h": 64},
                      "search": {"beta": [0.5, 1.5]}}, "search.beta", "beta must be at most 1"),
}


@pytest.mark.parametrize("case", sorted(NOT_A_NUMBER))
def test_plan_refuses_text_in_a_numeric_search_list(capsys, tmp_path, case):
    """Before, text in these lists was dropped point by point as an invalid shape, or read
    as a category and multiplied into a traceback."""
    changes, key, problem = NOT_A_NUMBER[case]
    path = write_space(tmp_path, **changes)
    code, out, err = shapesweep(capsys, "plan", str(path))
    assert_refused(code, err, path, key, problem)


NUMBERS_AS_TEXT = {  # each raised TypeError (a str in numpy arithmetic) or solved the wrong shape
    "searched d_model": {"fixed": {"n_heads": 2, "vocab_size": 256}, "search": {"d_model": [32, "64"], "n_layers": [2]}},
    "searched ffn_ratio": {"fixed": {"d_model": 32, "n_heads": 2}, "search": {"ffn_ratio": [2, "4"]},
                           "solve": "n_layers", "budget": {"non_embedding_params": 30912, "tolerance": 0.3}},
    "fixed ffn_ratio": {"fixed": {"d_model": 32, "n_heads": 2, "ffn_ratio": "4"}, "search": {"n_layers": [1, 2, 3]},
                        "solve": [], "budget": {"non_embedding_params": 30912, "tolerance": 0.5}},
    "searched width_depth_ratio": {"fixed": {"n_heads": 2, "ffn_ratio": 4}, "search": {"width_depth_ratio": [16, "8"]},
                                   "solve": ["d_model", "n_layers"], "budget": {"non_embedding_params": 30912,
                                                                                "tolerance": 0.3}},
    "hourglass k": {"family": "hourglass", "search": {"n_layers": [1, 2], "k": [2, "3"]}},
}


@pytest.mark.parametrize("case", sorted(NUMBERS_AS_TEXT))
def test_a_number_written_as_text_plans_as_the_number(capsys, tmp_path, case):
    def numbers(value):
        if isinstance(value, dict):
            return {k: numbers(v) for k, v in value.items()}
        if isinstance(value, list):
            return [numbers(v) for v in value]
        return float(value) if isinstance(value, str) and value[0].isdigit() else value

    outputs = []
    for folder, changes in (("text", NUMBERS_AS_TEXT[case]), ("numbers", numbers(NUMBERS_AS_TEXT[case]))):
        (tmp_path / folder).mkdir()
        path = write_space(tmp_path / folder, **changes)
        code, out, err = shapesweep(capsys, "plan", str(path), "--format", "json")
        assert code == 0, err
        outputs.append(json.loads(out))
    assert outputs[0] == outputs[1] and outputs[0]


@pytest.mark.parametrize("text", ['{"scheduler": "asha", "reduction', "\x00garbage", "[1, 2]",
                                  '{"scheduler": "asha"}', '{"scheduler": "asha", "reduction_factor": "x"}'])
def test_status_of_a_damaged_sweep_json_is_one_line(capsys, tmp_path, text):
    from shapesweep.results.store import sweep_dir
    from tests.synthetic import write_synthetic

    root = tmp_path / "root"
    write_synthetic(str(root), "damaged", 4)
    options = Path(sweep_dir(str(root), "damaged")) / "sweep.json"
    options.write_text('{"scheduler": "asha", "reduction_factor": 3.0}')
    code, out, err = shapesweep(capsys, "status", "damaged", "--root", str(root))
    assert code == 0 and out, err  # the control: a whole file is read
    options.write_text(text)
    code, out, err = shapesweep(capsys, "status", "damaged", "--root", str(root))
    assert_refused(code, err, options, None, "not a sweep options file")


# ---------------------------------------------------------------- issue 24: training settings

BAD_TRAIN = {
    "beta1 -1": ("beta1", -1, "greater than or equal to 0"),
    "beta1 1": ("beta1", 1, "less than 1"),
    "beta2 1e30": ("beta2", 1e30, "less than 1"),
    "beta1 nan": ("beta1", float("nan"), "finite number"),
    "beta2 inf": ("beta2", float("inf"), "finite number"),
    "lr inf": ("lr", float("inf"), "finite number"),
    "weight_decay inf": ("weight_decay", float("inf"), "finite number"),
    "z_loss inf": ("z_loss", float("inf"), "finite number"),
    "noise_std inf": ("noise_std", float("inf"), "finite number"),
    "decay_power inf": ("decay_power", float("inf"), "finite number"),
    "grad_clip nan": ("grad_clip", float("nan"), "finite number"),
    "min_lr_frac nan": ("min_lr_frac", float("nan"), "finite number"),
    "tokens_per_param nan": ("tokens_per_param", float("nan"), "finite number"),
}


@pytest.mark.parametrize("case", sorted(BAD_TRAIN))
def test_training_settings_are_checked_by_plan_run_and_train(capsys, tmp_path, case):
    """Each passed plan and run and then failed inside every Ray trial (train: a traceback)."""
    key, value, problem = BAD_TRAIN[case]
    train = {k: v for k, v in TINY_TRAIN.items() if key != "tokens_per_param" or k != "tokens"}
    space = write_space(tmp_path, train={**train, key: value})
    code, out, err = shapesweep(capsys, "plan", str(space))
    assert_refused(code, err, space, f"train.{key}", problem)
    root = tmp_path / "root"
    code, _, err = shapesweep(capsys, "run", str(space), "--root", str(root), "--no-progress")
    assert_refused(code, err, space, f"train.{key}", problem)
    assert not root.exists()  # refused before the catalog, the sweep folder or Ray
    candidate = _candidate(tmp_path, TINY_MODEL, {"steps": 2, "seq_len": 32, "batch_tokens": 64, key: value})
    code, out, err = shapesweep(capsys, "train", str(candidate), "--device", "cpu")
    assert_refused(code, err, candidate, f"train.{key}", problem)
    assert out == ""


def test_betas_of_zero_are_a_valid_recipe(capsys, tmp_path):
    """[0, 1) is AdamW's range: no momentum (beta1 0) and beta2 0 train."""
    space = write_space(tmp_path, train={**TINY_TRAIN, "beta1": 0, "beta2": 0.0})
    code, _, err = shapesweep(capsys, "plan", str(space))
    assert code == 0, err


# ---------------------------------------------------------------- issue 39: every file of a sweep folder


SWEEP = "damaged"


@pytest.fixture
def sweep_folder(tmp_path) -> Path:
    """What `run` leaves, without Ray: trials through the store, the space, the options, the
    noise-aware ASHA's decisions, and the catalog row (the files a sweep folder holds)."""
    from shapesweep.results.catalog import Catalog, default_catalog_url
    from shapesweep.results.store import sweep_dir, write_sweep_file
    from shapesweep.sweep.options.fields import saved_values
    from shapesweep.sweep.options.sweep_options import SweepOptions
    from tests.synthetic import write_synthetic

    root = tmp_path / "root"
    write_synthetic(str(root), SWEEP, 4, families=("conventional",), budgets=(30e6,), seeds=1, tune=None)
    text = yaml.safe_dump({**TINY_SPACE, "name": SWEEP}, sort_keys=False)
    write_sweep_file(str(root), SWEEP, "space.yaml", text)
    options = saved_values(SweepOptions(space="space.yaml", name=SWEEP, root=str(root)))
    write_sweep_file(str(root), SWEEP, "sweep.json", json.dumps(options | {"space": "space.yaml"}))
    decision = {"key": "a", "tuned_json": "{}", "rung_tokens": 4096, "losses": {"0": 2.5},
                "stop": True, "protected": False, "cut_key": "b", "cut_tuned_json": "{}",
                "delta": 0.1, "ci_low": 0.05, "ci_high": 0.15}
    write_sweep_file(str(root), SWEEP, "asha.json", json.dumps([decision]))
    space = load_space(str(Path(sweep_dir(str(root), SWEEP)) / "space.yaml"))
    Catalog(default_catalog_url(root)).register(SWEEP, space.name, text, space.space_hash, 4)
    return root


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _zeroed(data: bytes) -> bytes:
    return bytes(len(data))


def _garbled(data: bytes) -> bytes:
    return bytes((b * 7 + 0x9B) % 256 for b in data)  # not UTF-8, not JSON, not YAML


SMALL_DAMAGES = {"truncated": _truncated, "zeroed": _zeroed, "garbled": _garbled}
COMMANDS = {"status": ["status", SWEEP], "status json": ["status", SWEEP, "--format", "json"],
            "dashboard": ["dashboard", SWEEP, "--out", "{tmp}/report.html"],
            "export": ["export", SWEEP, "--top", "2", "--out", "{tmp}/best"],
            "resume": ["resume", SWEEP]}
# which commands read which file (resume refuses before Ray starts); a FIFO resume never
# reads asha.json, and would run the sweep: left out
READERS = {"sweep.json": {"status", "status json", "dashboard", "export", "resume"},
           "space.yaml": {"status", "status json", "dashboard", "export", "resume"},
           "asha.json": {"status", "status json", "dashboard", "export"}}


def _command(verb: str, root: Path, tmp_path: Path) -> list[str]:
    return [part.format(tmp=tmp_path) for part in COMMANDS[verb]] + ["--root", str(root)]


def _errors(err: str) -> list[str]:
    return [line for line in err.strip().splitlines() if line and not line.startswith("warning:")]


@pytest.mark.parametrize("verb", [v for v in COMMANDS if v != "resume"])
def test_the_undamaged_sweep_folder_serves_every_command(capsys, tmp_path, sweep_folder, verb):
    """The control: each command reads the whole folder the damage tests break."""
    code, out, err = shapesweep(capsys, *_command(verb, sweep_folder, tmp_path))
    assert code == 0 and _errors(err) == [], err
    if verb == "status":
        assert "stopped at" in out  # asha.json read


@pytest.mark.parametrize(("name", "verb"), [(n, v) for n in sorted(READERS) for v in sorted(READERS[n])])
@pytest.mark.parametrize("damage", sorted(SMALL_DAMAGES))
def test_a_damaged_small_file_is_one_line_naming_it_and_the_repair(capsys, tmp_path, sweep_folder,
                                                                    name, damage, verb):
    path = sweep_folder / SWEEP / name
    path.write_bytes(SMALL_DAMAGES[damage](path.read_bytes()))
    before = files_under(sweep_folder)
    code, out, err = shapesweep(capsys, *_command(verb, sweep_folder, tmp_path))
    if name == "asha.json" and verb in ("dashboard", "export") or (
            name == "space.yaml" and damage == "truncated" and code == 0):
        # not read, or a truncated YAML that is still a space document
        assert code == 0 and _errors(err) == [], err
        return
    errors = _errors(err)
    assert code == 2 and len(errors) == 1, err
    assert str(path) in errors[0], errors[0]
    assert "repair" in errors[0] or verb == "resume" and name == "space.yaml", errors[0]
    assert "Traceback" not in err
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "best").exists()
    assert files_under(sweep_folder) <= before | {p for p in files_under(sweep_folder) if "shapesweep.db" in p.name}


def _catalog_row(root: Path, statement: str) -> None:
    import sqlite3

    with contextlib.closing(sqlite3.connect(root / "shapesweep.db")) as db:
        db.execute(statement)
        db.commit()


CATALOG_DAMAGES = {
    "created_at garbage": f"UPDATE shapesweep_sweeps SET created_at = 'garbage' WHERE name = '{SWEEP}'",
    "updated_at bytes": f"UPDATE shapesweep_sweeps SET updated_at = x'00ff' WHERE name = '{SWEEP}'",
    "a row no sweep can be": "INSERT INTO shapesweep_sweeps SELECT '../../etc', space_name, space_yaml, "
                             "space_hash, n_candidates, status, completed, stopped_early, failed, "
                             f"created_at, updated_at FROM shapesweep_sweeps WHERE name = '{SWEEP}'",
    "a name with terminal escapes": "INSERT INTO shapesweep_sweeps SELECT char(27) || ']0;x' || char(7) "
                                    "|| char(27) || '[2J', space_name, space_yaml, space_hash, "
                                    "n_candidates, status, completed, stopped_early, failed, created_at, "
                                    f"updated_at FROM shapesweep_sweeps WHERE name = '{SWEEP}'",
    "a lease with no time": f"INSERT INTO shapesweep_leases VALUES ('{SWEEP}', 'elsewhere', 1, 't', "
                            "'garbage', 'garbage')",
}


@pytest.mark.parametrize("verb", [v for v in COMMANDS if v != "resume"] + ["status of every sweep"])
@pytest.mark.parametrize("damage", sorted(CATALOG_DAMAGES))
def test_a_damaged_catalog_row_is_a_warning_and_every_other_row_is_listed(capsys, tmp_path, sweep_folder,
                                                                          damage, verb):
    from tests.synthetic import write_synthetic

    write_synthetic(str(sweep_folder), "other", 2)
    _catalog_row(sweep_folder, CATALOG_DAMAGES[damage])
    argv = (["status", "--root", str(sweep_folder)] if verb == "status of every sweep"
            else _command(verb, sweep_folder, tmp_path))
    code, out, err = shapesweep(capsys, *argv)
    assert code == 0 and _errors(err) == [], err
    assert "\x1b" not in out + err and "\x07" not in out + err  # nothing drives the terminal
    if verb == "status of every sweep":
        assert SWEEP in out and "other" in out


@pytest.mark.parametrize("damage", sorted(CATALOG_DAMAGES))
def test_what_resume_asks_of_a_damaged_catalog_row_works(sweep_folder, damage):
    """register (the same space), the lease, the status: what `resume` does before Ray."""
    from shapesweep.results.catalog import Catalog, default_catalog_url

    _catalog_row(sweep_folder, CATALOG_DAMAGES[damage])
    catalog = Catalog(default_catalog_url(sweep_folder))
    record = catalog.get(SWEEP)
    assert catalog.register(SWEEP, record.space_name, record.space_yaml, record.space_hash, 4) == record
    assert catalog.take_lease(SWEEP, "mine") is None  # a lease with no time is a dead one
    assert catalog.set_status(SWEEP, "running").status == "running"
    assert [r.name for r in catalog.list()] == [SWEEP]


@pytest.mark.parametrize("verb", ["status", "status json", "dashboard", "export"])
def test_a_trial_whose_config_json_is_not_json_is_skipped_with_a_warning(capsys, tmp_path, sweep_folder, verb):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = min((sweep_folder / SWEEP / "trials").glob("*.parquet"))
    table = pq.read_table(path)
    lost = table["trial_id"][0].as_py()
    column = table.schema.get_field_index("config_json")
    pq.write_table(table.set_column(column, "config_json", pa.array(['{"model": {"d_mo'])), path)
    code, out, err = shapesweep(capsys, *_command(verb, sweep_folder, tmp_path))
    assert code == 0 and _errors(err) == [], err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert str(path) in line and lost in line and "not a JSON object" in line


OPTUNA_DAMAGES = {
    "a complete trial without values": ("DELETE FROM trial_values WHERE trial_id = 2",
                                        "values should be set for a complete trial"),
    "a distribution that is not JSON": ("UPDATE trial_params SET distribution_json = 'garbage' "
                                        "WHERE trial_id = 2", "JSONDecodeError"),
    "an attribute that is not JSON": ("UPDATE trial_user_attributes SET value_json = '{\"a' "
                                      "WHERE trial_id = 2", "JSONDecodeError"),
    "no study row": ("DELETE FROM studies", "Record does not exist"),
    "a state Optuna has not": ("UPDATE trials SET state = 'BOGUS' WHERE trial_id = 2", "BOGUS"),
}


@pytest.mark.parametrize("damage", sorted(OPTUNA_DAMAGES))
def test_resume_of_an_optuna_sweep_with_a_damaged_study_is_one_line_before_ray(capsys, tmp_path,
                                                                             sweep_folder, damage):
    import optuna

    from shapesweep.results.catalog import default_catalog_url
    from shapesweep.results.store import write_sweep_file

    options = json.loads((sweep_folder / SWEEP / "sweep.json").read_text())
    write_sweep_file(str(sweep_folder), SWEEP, "sweep.json",
                     json.dumps(options | {"search": "optuna", "num_samples": 4}))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=default_catalog_url(sweep_folder), study_name=SWEEP)
    for number in range(3):
        trial = study.ask()
        trial.suggest_categorical("n_layers", [1, 2, 3, 4])
        trial.set_user_attr("trial_id", f"t{number}")
        study.tell(trial, 2.5)
    statement, problem = OPTUNA_DAMAGES[damage]
    _catalog_row(sweep_folder, statement)
    code, out, err = shapesweep(capsys, "resume", SWEEP, "--root", str(sweep_folder))
    errors = _errors(err)
    assert code == 2 and len(errors) == 1, err
    assert f"{sweep_folder / 'shapesweep.db'}: the Optuna study {SWEEP!r} in it is damaged" in errors[0]
    assert problem in errors[0] and "optuna delete-study --study-name damaged" in errors[0]


@pytest.mark.parametrize("text", ['[{"stop": true}]', '[1]', '{"stop": true}',
                                  '[{"key": "a", "tuned_json": "{x", "rung_tokens": 1, "losses": {}, '
                                  '"stop": true, "cut_key": "b", "cut_tuned_json": "{}", "delta": 0, '
                                  '"ci_low": 0, "ci_high": 0}]'])
@pytest.mark.parametrize("verb", ["status", "status json"])
def test_an_asha_json_of_no_decisions_is_one_line(capsys, tmp_path, sweep_folder, text, verb):
    path = sweep_folder / SWEEP / "asha.json"
    path.write_text(text)
    code, out, err = shapesweep(capsys, *_command(verb, sweep_folder, tmp_path))
    assert_refused(code, err, path, None, "to repair, delete it")
