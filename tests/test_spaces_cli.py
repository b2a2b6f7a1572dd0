"""`shapesweep spaces` / `shapesweep plan` through the real entry point, and bad input -> exit 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shapesweep.search_spaces.space import list_builtin
from shapesweep.sweep.cli import main as cli

BUILTINS = [name for name, _ in list_builtin()]
DESIGN_CANDIDATE_KEYS = {"key", "family", "params_total", "params_non_embedding", "params_attention",
                         "params_ffn", "flops_per_token", "kv_cache_per_token", "avg_layer_width",
                         "budget_error"}


@pytest.fixture(autouse=True)
def only_space_verbs(monkeypatch):
    """Build the real parser with just this package's verbs, so these tests do not depend on
    the trainers / sweep / dashboards verb modules (their own tests cover them)."""
    monkeypatch.setattr(cli, "VERBS", {v: cli.VERBS[v] for v in ("spaces", "plan")})


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_full_space_has_a_tiny_twin():
    full = {n for n in BUILTINS if not n.endswith("-small") and not n.startswith("demo-")}
    assert len(full) >= 13
    for name in full:
        stem = re.sub(r"-\d+m$", "", name)  # hourglass-ucurve-113m -> hourglass-ucurve-small
        assert f"{stem}-small" in BUILTINS, name


def test_spaces_lists_every_builtin(capsys):
    code, out, _ = run(capsys, "spaces")
    assert code == 0
    for name in BUILTINS:
        assert name in out


@pytest.mark.parametrize("name", BUILTINS)
def test_plan_every_builtin_space(capsys, name):
    code, out, err = run(capsys, "plan", name)
    assert code == 0, err
    assert "raw points ->" in out and "unique candidates" in out
    code, out, err = run(capsys, "plan", name, "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert err.splitlines()[0].endswith(f"-> {len(rows)} unique candidates")  # stdout: only JSON
    assert rows and all(DESIGN_CANDIDATE_KEYS <= set(row) for row in rows)
    errors = [abs(row["budget_error"]) for row in rows]
    assert errors == sorted(errors)
    assert len({row["key"] for row in rows}) == len(rows)
    if name.endswith("-small"):  # trains on 2 CPU cores in minutes
        assert len(rows) <= 12
        assert all(row["params_total"] < 1_000_000 for row in rows)


RATIO_GRID = """
name: ratio-grid
budget: {match: {family: conventional, d_model: 64, n_layers: 4, d_h: 256}, tolerance: 0.05}
fixed: {n_heads: 2, vocab_size: 256, activation: swiglu}
variants:
  - {name: baseline, family: conventional, fixed: {d_model: 64, n_layers: 4, d_h: 256}}
  - name: hourglass
    family: hourglass
    search: {k: [2, 4], ffn_ratio: [0.5], width_depth_ratio: [6, 12, 24, 48, 96, 192]}
    solve: [d_model, n_layers]
train: {tokens: 200K}
"""


def test_plan_lists_the_dropped_grid_points_with_their_reasons(capsys, tmp_path):
    (tmp_path / "ratio-grid.yaml").write_text(RATIO_GRID)
    code, out, _ = run(capsys, "plan", str(tmp_path / "ratio-grid.yaml"))
    assert code == 0
    lines = out.splitlines()
    at = lines.index("dropped 1 of 13 grid points:")
    assert lines[at + 1] == ("  hourglass: k=4 ffn_ratio=0.5 width_depth_ratio=96: within budget only at "
                             "d_model/n_layers = 58, more than a factor √2 from the target")


def test_plan_csv_and_seq_len(capsys):
    code, out, _ = run(capsys, "plan", "hourglass-fixed-attention-small", "--format", "csv")
    header, *lines = out.strip().splitlines()
    assert code == 0 and header.startswith("key,family,") and len(lines) == 4
    short = json.loads(run(capsys, "plan", "hourglass-fixed-attention-small", "--format", "json")[1])
    long = json.loads(run(capsys, "plan", "hourglass-fixed-attention-small", "--format", "json",
                          "--seq-len", "1024")[1])
    assert [r["key"] for r in short] == [r["key"] for r in long]
    assert all(b["flops_per_token"] > a["flops_per_token"] for a, b in zip(short, long, strict=True))


GOOD = """\
name: bad-input
family: hourglass
budget: {non_embedding_params: 113.2M}
fixed: {d_model: 768, n_layers: 12, n_heads: 12, vocab_size: 50304}
search: {k: [5, 6]}
solve: d_h
train: {tokens: 1M}
"""

BAD = {
    "unknown top-level key": (GOOD + "colour: blue\n", "colour", "unknown key 'colour'"),
    "unknown budget key": (GOOD.replace("non_embedding_params", "params"), "budget.params", "unknown key"),
    "unknown dimension": (GOOD.replace("k: [5, 6]", "kk: [5, 6]"), "search.kk", "unknown dimension"),
    "wrong type": (GOOD.replace("n_layers: 12", "n_layers: twelve"), "fixed.n_layers", "cannot read"),
    "zero dimension": (GOOD.replace("d_model: 768", "d_model: 0"), "fixed.d_model", "must be positive"),
    "negative search value": (GOOD.replace("k: [5, 6]", "k: [5, -6]"), "search.k", "must be positive"),
    "range min > max": (GOOD.replace("k: [5, 6]", "k: {min: 8, max: 2, num: 3}"), "search.k",
                        "greater than max"),
    "two budgets": (GOOD.replace("{non_embedding_params: 113.2M}",
                                 "{non_embedding_params: 1M, total_params: 2M}"), "budget", "exactly one"),
    "bad count": (GOOD.replace("113.2M", "lots"), "budget.non_embedding_params", "cannot read"),
    "unsolvable dim": (GOOD.replace("solve: d_h", "solve: k"), "solve", "cannot solve"),
    "bad constraint": (GOOD + "constraints: ['d_model %% 2 ==']\n", "constraints[0]", "not an expression"),
    "unknown name in constraint": (GOOD + "constraints: ['width > 3']\n", "constraints[0]", "'width'"),
    "impossible budget": (GOOD.replace("113.2M", "5T"), "budget", "out of reach"),
    "nothing within tolerance": (GOOD.replace("search: {k: [5, 6]}\nsolve: d_h\n", "search: {d_h: [600, 900]}\n"),
                                 "budget.tolerance", "closest"),
    "malformed yaml": (GOOD.replace("search: {k: [5, 6]}", "search: {k: [5, 6}"), None, "malformed YAML"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, case):
    text, key, problem = BAD[case]
    path = tmp_path / "space.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "plan", str(path))
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0] and problem in lines[0]
    if key:
        assert f": {key}: " in lines[0]


def test_missing_file_and_unknown_builtin(capsys, tmp_path):
    code, _, err = run(capsys, "plan", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml: no such file" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "plan", "no-such-space")
    assert code == 2 and "no-such-space" in err and "built-ins:" in err


def test_console_script_end_to_end(tmp_path):
    """The installed entry point prints the plan (subprocess, as a user runs it): its quick
    exit (`cli.quick_exit`) writes all the output and keeps the verb's exit status."""
    script = Path(sys.executable).with_name("shapesweep")
    result = subprocess.run([str(script), "plan", "ffn-variants-small", "--format", "json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert {row["activation"] for row in json.loads(result.stdout)} == {"swiglu", "simple_gated", "gelu"}
    refused = subprocess.run([str(script), "plan", str(tmp_path / "nope.yaml")],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and refused.stderr.strip().endswith("nope.yaml: no such file")


def test_plan_out_writes_candidate_documents_train_accepts(capsys, tmp_path):
    """`plan --out DIR` writes one candidate YAML per candidate, keyed like the JSON rows."""
    from shapesweep.search_spaces.candidate_file import load_candidate

    code, out, _ = run(capsys, "plan", "hourglass-fixed-attention-small", "--format", "json",
                       "--out", str(tmp_path / "cands"))
    assert code == 0
    rows = json.loads(out)
    files = sorted((tmp_path / "cands").glob("*.yaml"))
    assert [f.stem for f in files] == sorted(r["key"] for r in rows)
    assert not [p for p in (tmp_path / "cands").iterdir() if p.name.startswith(".")]
    by_key = {r["key"]: r for r in rows}
    for file in files:
        model_config, train = load_candidate(file)
        assert model_config.d_h == by_key[file.stem]["d_h"]
        assert train.seq_len > 0
