"""Resource limits (`shapesweep.search_spaces.limits`): a small file that would exhaust the
machine is one line `file: key: problem` and exit 2 from the real `shapesweep` entry point,
counted before anything is expanded; a space at each limit is still accepted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shapesweep.families import variable_width as widths
from shapesweep.search_spaces import limits
from shapesweep.search_spaces.configs import make_config
from shapesweep.search_spaces.space import parse_space
from shapesweep.sweep.cli.main import main
from tests.sweep_helpers import TINY_SPACE, write_space

REPO = Path(__file__).resolve().parents[1]
RUN_IN = 60  # s: a subprocess past this is a regression that would otherwise hang the suite


def shapesweep_process(*argv: str, memory_gib: int = 4) -> subprocess.CompletedProcess:
    """`shapesweep ARGV` in a fresh process held to `memory_gib` of address space and RUN_IN
    seconds, so an unbounded expansion fails the test instead of the machine."""
    limit = f"ulimit -v {memory_gib << 20}; exec {sys.executable} -m shapesweep.sweep.cli \"$@\""
    return subprocess.run(["bash", "-c", limit, "shapesweep", *argv], capture_output=True,
                          text=True, timeout=RUN_IN, cwd=REPO)


def assert_one_line(result: subprocess.CompletedProcess, file: str | Path | None, key: str,
                    problem: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert f": {key}: " in lines[0] and problem in lines[0], lines[0]
    if file is not None:
        assert str(file) in lines[0], lines[0]


def _values(n: int, scale: float) -> list[float]:
    return [round(scale * (i + 1), 12) for i in range(n)]


TOO_MANY_TRIALS = {
    # three tune keys of 1,000 values grew to 2.8 GB and died in a MemoryError; two took 219 s
    "three tune keys of 1,000": ({"tune": {"lr": _values(1000, 1e-5), "weight_decay": _values(1000, 1e-4),
                                           "z_loss": _values(1000, 1e-6)}}, "tune", "at least 1,000,000,000 trials"),
    "two tune keys of 1,000": ({"tune": {"lr": _values(1000, 1e-5), "weight_decay": _values(1000, 1e-4)}},
                               "tune", "at least 1,000,000 trials"),
    "tuned x seeds": ({"tune": {"lr": _values(200, 1e-5)}, "seeds": list(range(1000))}, "tune",
                      "(1 variant x 200 tuned settings x 1,000 seeds)"),
    "variants x seeds": ({"variants": [{"name": f"v{i}"} for i in range(200)], "seeds": list(range(1000))},
                         "seeds", "at least 200,000 trials"),
}


@pytest.mark.parametrize("case", sorted(TOO_MANY_TRIALS))
def test_plan_counts_trials_before_expanding_them(tmp_path, case):
    changes, key, problem = TOO_MANY_TRIALS[case]
    path = write_space(tmp_path, **changes)
    result = shapesweep_process("plan", str(path))
    assert_one_line(result, path, key, problem)
    assert "the limit is 100,000" in result.stderr and result.stdout == ""


# 4 candidates (TINY_SPACE) x 100 lr values x 300 seeds: 400 per variant passes the first count,
# the solved 4 candidates do not.
SOLVED_TOO_MANY = {"tune": {"lr": _values(100, 1e-5)}, "seeds": list(range(300))}


def test_plan_counts_trials_again_once_the_candidates_are_known(tmp_path):
    path = write_space(tmp_path, **SOLVED_TOO_MANY)
    result = shapesweep_process("plan", str(path))
    assert_one_line(result, path, "tune", "120,000 trials (4 candidates x 100 tuned settings x 300 seeds)")


@pytest.mark.parametrize("seeds_flag", [None, "300"])
def test_run_refuses_too_many_trials_before_any_sweep_state(tmp_path, seeds_flag):
    """From the space's own seeds, or from --seeds: refused before the catalog, the sweep
    folder or Ray exists."""
    space = {"tune": {"lr": _values(100, 1e-5)}} | ({} if seeds_flag else {"seeds": list(range(300))})
    path, root = write_space(tmp_path, **space), tmp_path / "root"
    extra = ["--seeds", seeds_flag] if seeds_flag else []
    result = shapesweep_process("run", str(path), "--root", str(root), "--no-progress", *extra)
    key = "--seeds" if seeds_flag else "tune"
    assert_one_line(result, None if seeds_flag else path, key, "120,000 trials")
    assert not root.exists()


def _grid(n_layers: int, vocab_sizes: list[int]) -> dict:
    return {"search": {"n_layers": {"min": 1, "max": n_layers, "step": 1}, "vocab_size": vocab_sizes}}


TOO_MUCH_WORK = {
    # a 10M-point grid under the old 50M limit took 67 s and 3.3 GB
    "raw points": (_grid(1000, [256, 512] * 501), "search", "1,002,000 raw points is too many"),
    "raw points over variants": (
        {**_grid(1000, [256, 512] * 250), "variants": [{"name": "a"}, {"name": "b"}, {"name": "c"}]},
        "variants", "1,500,000 raw points is too many"),
    "text and flag combinations": (
        {"search": {"n_layers": [1, 2], "activation": ["swiglu", "geglu"] * 26,
                    "bias": [True, False] * 20}}, "search", "2,080 combinations"),
    "k combinations": ({"family": "hourglass", "search": {"n_layers": [1, 2], "k": {"min": 1, "max": 1024, "step": 1},
                                                          "bias": [True, False, True]}},
                       "search", "3,072 combinations"),
    "variants": ({"variants": [{"name": f"v{i}"} for i in range(257)]}, "variants", "257 variants"),
    "variants from family lists": ({"family": None, "variants": [{"family": ["conventional", "hourglass"]}
                                                                 for _ in range(129)]},
                                   "variants", "258 variants"),
    # xformer's width solve is Python work per layer and point: 5,000 points x 12 layers
    "><former layer solves": ({"family": "variable_width", "fixed": {"n_heads": 2, "d_model": 32, "n_layers": 12,
                                                                     "d_h": 64},
                               "search": {"alpha": {"min": 0.1, "max": 0.9, "num": 5000}}, "solve": []},
                              "search", "60,000 layer solves"),
}


@pytest.mark.parametrize("case", sorted(TOO_MUCH_WORK))
def test_plan_refuses_a_solve_that_would_not_end_in_seconds(tmp_path, case):
    changes, key, problem = TOO_MUCH_WORK[case]
    path = tmp_path / "space.yaml"
    doc = {k: v for k, v in {**TINY_SPACE, **changes}.items() if v is not None}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = shapesweep_process("plan", str(path))
    assert_one_line(result, path, key, problem)
    assert result.stdout == ""


def test_each_work_limit_is_inclusive():
    """A space at each limit is accepted (parsed and checked; not solved here)."""
    at_raw = {**TINY_SPACE, "fixed": {"d_model": 32, "n_heads": 2},
              "search": {"n_layers": {"min": 1, "max": 1000, "step": 1}, "vocab_size": [256] * 1000}}
    at_combos = {**TINY_SPACE, "fixed": {"d_model": 32, "n_heads": 2},
                 "search": {"n_layers": [1], "activation": ["swiglu"] * 1000, "bias": [True, False]}}
    at_variants = {**TINY_SPACE, "variants": [{"name": f"v{i}"} for i in range(limits.MAX_VARIANTS)]}
    at_solves = {**TINY_SPACE, "family": "variable_width", "solve": [],
                 "fixed": {"n_heads": 2, "d_model": 32, "n_layers": 10, "d_h": 64},
                 "search": {"alpha": {"min": 0.1, "max": 0.9, "num": 1000}}}
    at_trials = {**TINY_SPACE, "tune": {"lr": _values(100, 1e-5)}, "seeds": list(range(1000))}
    for doc, counted in ((at_raw, "raw_bound"), (at_combos, "combo_bound"), (at_solves, "layer_solves")):
        space = parse_space(doc)
        assert sum(getattr(v, counted) for v in space.resolved()) == {
            "raw_bound": limits.MAX_RAW, "combo_bound": limits.MAX_COMBOS,
            "layer_solves": limits.MAX_LAYER_SOLVES}[counted]
    assert len(parse_space(at_variants).resolved()) == limits.MAX_VARIANTS
    assert parse_space(at_trials).tuned_count * 1000 == limits.MAX_TRIALS


def test_plan_refuses_more_distinct_shapes_than_any_sweep_trains(tmp_path):
    """15,000 points, each its own shape within a loose tolerance: refused before any of them
    becomes a typed config."""
    path = write_space(tmp_path, budget={"non_embedding_params": "10M", "tolerance": 100},
                       fixed={"n_heads": 2, "vocab_size": 256},
                       search={"d_model": {"min": 64, "max": 64 + 4 * 149, "step": 4},
                               "n_layers": {"min": 1, "max": 100, "step": 1}})
    result = shapesweep_process("plan", str(path))
    assert_one_line(result, path, "search", "more than 10,000 distinct shapes meet the budget")


DEPTHS = {
    "fixed n_layers": ({"fixed": {**TINY_SPACE["fixed"], "n_layers": 1025}, "search": {}}, "fixed.n_layers"),
    "searched n_layers": ({"search": {"n_layers": [4, 65_537]}}, "search.n_layers"),
    "hourglass k": ({"family": "hourglass", "search": {"n_layers": [1, 2], "k": [2, 4096]}}, "search.k"),
}


@pytest.mark.parametrize("case", sorted(DEPTHS))
def test_depth_is_capped(tmp_path, case):
    """2**20 layers were allowed; a ><former of 65,537 planned for 22 minutes."""
    changes, key = DEPTHS[case]
    path = write_space(tmp_path, **changes)
    result = shapesweep_process("plan", str(path))
    assert_one_line(result, path, key, "must be at most 1,024")


def test_train_refuses_a_candidate_deeper_than_the_cap(capsys, tmp_path):
    path = tmp_path / "candidate.yaml"
    path.write_text(yaml.safe_dump({"family": "variable_width", "train": {"steps": 1},
                                    "model": {"d_model": 32, "n_layers": 4096, "n_heads": 2, "d_h": 64}}))
    code = main(["train", str(path), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{path}: model.n_layers: " in err and "less than or equal to 1024" in err


class _Compared(float):
    """A width that counts the comparisons made with it (max and min compare pairwise)."""

    count = 0

    def _note(self, other, op):
        _Compared.count += 1
        return op(float(self), float(other))

    def __lt__(self, other):
        return self._note(other, float.__lt__)

    def __gt__(self, other):
        return self._note(other, float.__gt__)

    def __le__(self, other):
        return self._note(other, float.__le__)

    def __ge__(self, other):
        return self._note(other, float.__ge__)


@pytest.mark.parametrize("resize", ["carry", "zero"])
def test_the_vformer_layer_shapes_take_linear_work_in_depth(resize):
    """The width solve evaluates every layer's shape dozens of times per config; each layer
    took a max over all layers before it and after it (quadratic: 4,096 layers planned in 59 s)."""
    config = make_config({"family": "variable_width", "d_model": 64, "n_layers": 8, "n_heads": 2,
                          "d_h": 128, "resize": resize})
    counts = {}
    for depth in (512, 1024):
        layer_widths = [_Compared(32 + (7 * i) % 64) for i in range(depth)]
        _Compared.count = 0
        shapes = widths.layer_shapes_for(config, layer_widths, integer=False)
        counts[depth] = _Compared.count
        assert len(shapes) == depth
    assert counts[1024] <= 2.2 * counts[512], counts  # quadratic would be 4x
    assert counts[1024] <= 6 * 1024, counts


# --- Smaller refusals (issue 39 item 8): each one line, exit 2, through the real entry point.

def _one_line(capsys, *argv: str) -> str:
    """`shapesweep ARGV` exits 2 with exactly one stderr line; that line."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_whole_number_no_float_holds_is_one_line(capsys, tmp_path):
    path = write_space(tmp_path)
    path.write_text(path.read_text().replace("vocab_size: 256", "vocab_size: 1" + "0" * 400))
    assert _one_line(capsys, "plan", str(path)) == (
        f"shapesweep plan: error: {path}: fixed.vocab_size: vocab_size is too large (a number "
        "of 401 digits)")


@pytest.mark.parametrize("where", ["name", "description", "key"])
def test_a_lone_surrogate_is_one_line_naming_its_key(capsys, tmp_path, where):
    path = write_space(tmp_path)
    text = path.read_text()
    if where == "name":
        text = text.replace("name: tiny-depths", 'name: "demo\\ud800quick"')
    elif where == "description":
        text += 'description: "a \\udc80 b"\n'
    else:
        text += '"k\\ud800": 1\n'
    path.write_text(text)
    for verb in ("plan", "run"):
        line = _one_line(capsys, verb, str(path), *(["--root", str(tmp_path / "r")] if verb == "run" else []))
        assert line.startswith(f"shapesweep {verb}: error: {path}: ") and "lone surrogate" in line
        assert line.encode("ascii")  # nothing unprintable: the escape is shown, not the character
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_the_fast_yaml_reader_gives_the_same_documents_and_refusals(tmp_path):
    """libyaml composes (`CSafeLoader`) where PyYAML has it; the documents are the pure-Python
    loader's, and a refusal is the pure-Python loader's message."""
    from shapesweep.common import UserError
    from shapesweep.search_spaces import safe_yaml

    texts = [yaml.safe_dump(TINY_SPACE), "a: [1, 2.5, x, null, true, 1e3, '7']\nb: {c: [d]}\n",
             "a: &x 1\nb: *x\n", "a: 1\na: 2\n", "a: [1\n", "x: <<\n"]

    def outcome(text):
        try:
            return safe_yaml.parse_yaml(text, "f.yaml")
        except UserError as error:
            return str(error)

    fast = [outcome(text) for text in texts]
    saved, safe_yaml._FastLoader = safe_yaml._FastLoader, None
    try:
        slow = [outcome(text) for text in texts]
    finally:
        safe_yaml._FastLoader = saved
    assert fast == slow
    assert "aliases" in fast[2] and "duplicate key" in fast[3] and "malformed YAML" in fast[4]


def test_an_unknown_root_scheme_is_one_line(capsys):
    for verb in ("status", "export x --top 1 --out o"):
        line = _one_line(capsys, *verb.split(), "--root", "foo://x/y")
        assert "--root: unknown storage scheme 'foo' in 'foo://x/y'" in line, line


def test_an_object_store_root_that_does_not_answer_is_one_line(capsys):
    """An S3 root whose endpoint refuses the connection (port 1 here): one line naming the
    root and pyarrow's reason, exit 2, not a traceback from the first read."""
    root = "s3://bucket/x?endpoint_override=127.0.0.1:1&scheme=http&region=us-east-1"
    line = _one_line(capsys, "status", "--root", root)
    assert f"--root: cannot open the results root {root!r}: " in line, line
    assert "Could not connect" in line and "Traceback" not in line


def test_an_export_out_that_cannot_be_made_is_one_line(capsys, tmp_path):
    from tests.test_export_out import _sweep

    _sweep(tmp_path / "root")
    line = _one_line(capsys, "export", "s", "--root", str(tmp_path / "root"), "--top", "1",
                     "--out", "/proc/self/x")
    assert line.startswith("shapesweep export: error: /proc/self/x: --out: "), line


def test_a_dashboard_out_that_is_a_folder_is_one_line(capsys, tmp_path):
    from tests.test_export_out import _sweep

    _sweep(tmp_path / "root")
    (tmp_path / "here").mkdir()
    line = _one_line(capsys, "dashboard", "s", "--root", str(tmp_path / "root"), "--out",
                     str(tmp_path / "here"))
    assert line == (f"shapesweep dashboard: error: {tmp_path / 'here'}: --out: is a folder: "
                    "give the file to write (e.g. FOLDER/report.html)")
    assert list((tmp_path / "here").iterdir()) == []


def test_resume_refuses_a_saved_address_nothing_answers_at(capsys, tmp_path):
    """Ray's GCS client retries an unreachable address for minutes; a socket probe says so."""
    import json
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = tmp_path / "root" / "gone"
    folder.mkdir(parents=True)
    builtin = Path(__file__).parents[1] / "search_spaces" / "builtin" / "demo-quick.yaml"
    (folder / "space.yaml").write_text(builtin.read_text())  # the sweep's copy of its space
    (folder / "sweep.json").write_text(json.dumps({"space": "space.yaml",
                                                    "address": f"127.0.0.1:{port}"}))
    line = _one_line(capsys, "resume", "gone", "--root", str(tmp_path / "root"), "--no-progress")
    assert line.startswith(f"shapesweep resume: error: --address: cannot reach a Ray cluster "
                           f"at 127.0.0.1:{port} ("), line


def test_a_postgresql_url_gets_the_driver_that_is_installed():
    """SQLAlchemy 2.1's default PostgreSQL driver is psycopg 3; a URL naming none gets the
    installed one, and a URL naming one, or another database, is kept as given."""
    import importlib.util

    from sqlalchemy.engine import make_url

    from shapesweep.common import UserError
    from shapesweep.sweep.options.store_args import POSTGRES_DRIVERS, with_installed_driver

    url = "postgresql://u:secret@db.example:5432/sweeps"
    default = make_url(url).get_dialect().driver
    installed = [d for d, (module, _) in POSTGRES_DRIVERS.items() if importlib.util.find_spec(module)]
    assert with_installed_driver("sqlite:///x.db") == "sqlite:///x.db"
    assert with_installed_driver("postgresql+psycopg2://u@h/d") == "postgresql+psycopg2://u@h/d"
    if default in installed:
        assert with_installed_driver(url) == url
    elif installed:
        assert with_installed_driver(url) == f"postgresql+{installed[0]}://u:secret@db.example:5432/sweeps"
    else:
        with pytest.raises(UserError, match="pip install"):
            with_installed_driver(url)


def test_status_on_a_postgresql_url_without_a_driver_name_is_one_line(capsys):
    line = _one_line(capsys, "status", "--storage", "postgresql://u:secret@127.0.0.1:1/db")
    assert line.startswith("shapesweep status: error: ") and "secret" not in line, line
    assert "No module named" not in line
