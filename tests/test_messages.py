"""Messages that point the right way: an error is located where the user wrote the key, a typo
gets the name meant (difflib), a dropped baseline is warned about, a sweep looked for in the
wrong folder names `--root`. Each through the real `shapesweep` entry point. (That an
interrupted sweep says the exact command that finishes it, and that command does, is
test_integrity_driver's SIGTERM test, on a sweep it runs anyway.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sweep_helpers import TWO_SHAPES, write_space

from shapesweep.sweep.cli.main import main

VARIANTS = {**TWO_SHAPES, "name": "typos"}


def shapesweep(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    return lines[0]


def _plan(capsys, tmp_path, doc: dict) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return one_line(*shapesweep(capsys, "plan", str(path))[::2])


def test_a_typo_in_the_top_level_family_is_reported_at_family_with_the_name_meant(capsys, tmp_path):
    """Every variant inherits it, but the user wrote it once, at the top."""
    line = _plan(capsys, tmp_path, {**VARIANTS, "family": "convetional"})
    assert line.endswith(": family: unknown family 'convetional' (did you mean 'conventional'? "
                         "allowed: conventional, hourglass, variable_width, vision_mlp)"), line


def test_a_typo_inside_a_variant_is_reported_at_that_variant(capsys, tmp_path):
    variants = [VARIANTS["variants"][0], {"name": "deep", "fixed": {"n_layers": 4, "d_modle": 40}}]
    line = _plan(capsys, tmp_path, {**VARIANTS, "variants": variants})
    assert ": variants[1].fixed.d_modle: unknown dimension 'd_modle' for family conventional " \
           "(did you mean 'd_model'? allowed: " in line, line


def test_a_typo_a_variant_inherits_is_reported_where_it_was_written(capsys, tmp_path):
    line = _plan(capsys, tmp_path, {**VARIANTS, "fixed": {**VARIANTS["fixed"], "n_haeds": 2}})
    assert ": fixed.n_haeds: unknown dimension 'n_haeds' for family conventional (did you mean " \
           "'n_heads'?" in line, line


def test_an_unknown_key_gets_the_key_meant(capsys, tmp_path):
    line = _plan(capsys, tmp_path, {**VARIANTS, "rount": {"d_h": 8}})
    assert ": rount: unknown key 'rount' (did you mean 'round'? allowed: name, " in line, line


def test_an_unknown_space_name_gets_the_built_in_meant(capsys):
    line = one_line(*shapesweep(capsys, "plan", "demo-ucurv")[::2])
    assert line.startswith("shapesweep plan: error: demo-ucurv: not a file and not a built-in space "
                           "(did you mean 'demo-ucurve'? built-ins: "), line


def test_an_unknown_verb_gets_the_verb_meant(capsys):
    line = one_line(*shapesweep(capsys, "stauts")[::2])
    assert line == ("shapesweep: error: unknown verb 'stauts' (did you mean 'status'? verbs: spaces, plan, "
                    "train, run, resume, status, export, dashboard, serve, demo, study)")


def _a_sweep(root: Path, name: str) -> None:
    """A sweep's results folder with one trial (the real store; no Ray)."""
    from synthetic import synthetic_sweep

    from shapesweep.results.store import write_trial

    row, curve = synthetic_sweep(name, 1, families=("conventional",), seed=1)[0]
    write_trial(str(root), name, row, curve)


@pytest.mark.parametrize("verb", ["status", "export", "resume"])
def test_a_mistyped_sweep_name_gets_the_name_meant_and_the_sweeps_there(capsys, tmp_path, verb):
    root = tmp_path / "sweeps"
    for name in ("tiny-depths", "other"):
        _a_sweep(root, name)
    extra = ["--top", "1", "--out", str(tmp_path / "best")] if verb == "export" else []
    line = one_line(*shapesweep(capsys, verb, "tiny-deptsh", "--root", str(root), *extra)[::2])
    assert line == (f"shapesweep {verb}: error: name: no sweep named 'tiny-deptsh' under {root} (did you "
                    "mean 'tiny-depths'? sweeps there: other, tiny-depths; --root names another folder)")


@pytest.mark.parametrize("verb", ["status", "export", "resume"])
def test_a_sweep_looked_for_from_another_folder_suggests_root(capsys, tmp_path, monkeypatch, verb):
    """`status NAME` (default root ./sweeps) run where there is no ./sweeps: `--root` is the
    answer; resume's line is that one line too, not "…/sweep.json: no sweep named …"."""
    monkeypatch.chdir(tmp_path)
    extra = ["--top", "1", "--out", "best"] if verb == "export" else []
    line = one_line(*shapesweep(capsys, verb, "demo-ucurve", *extra)[::2])
    assert line == (f"shapesweep {verb}: error: name: no sweep named 'demo-ucurve' under ./sweeps, and no "
                    "sweeps there: give --root, the folder the sweep was run with (./sweeps where `run` ran)")
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_a_tolerance_that_drops_the_baseline_is_warned_about_by_plan_and_run(capsys, tmp_path):
    """The baseline's fixed shape is 5% off the budget: with a 1% tolerance it is dropped,
    and nothing would be compared with it."""
    from shapesweep.search_spaces.space import load_space
    from shapesweep.sweep.driver.runner import SweepOptions
    from shapesweep.sweep.search.strategies import strategy_for

    doc = {**VARIANTS, "budget": {"match": {"d_model": 64, "n_layers": 4, "d_h": 256}, "tolerance": 0.01},
           "fixed": {"n_heads": 2, "vocab_size": 256, "activation": "swiglu"},
           "variants": [{"name": "baseline", "fixed": {"d_model": 64, "n_layers": 4, "d_h": 240}, "solve": []},
                        {"name": "deep", "fixed": {"d_model": 40, "n_layers": 10}}]}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    warning = ("warning: variant 'baseline' has no candidate (closest budget error -4.7% is outside the "
               "tolerance 0.01): no other candidate will be compared with it; widen budget.tolerance or "
               "put the baseline on budget")
    code, out, _ = shapesweep(capsys, "plan", str(path))
    assert code == 0 and warning in out.splitlines()
    strategy = strategy_for(SweepOptions(space=str(path)), load_space(path))  # what `run` prints first
    assert warning in strategy.notices
    doc["budget"]["tolerance"] = 0.05  # within tolerance: no warning
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert shapesweep(capsys, "plan", str(path))[0] == 0
    assert "warning" not in capsys.readouterr().out


# --- Nothing the user or the store supplies drives the terminal (issue 39 item 7).

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m\r"  # retitle, ring, clear, a C1 CSI, a carriage return


def _no_controls(text: str) -> None:
    """No control character but newline (and tab) in what reached the terminal."""
    assert not [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f], text


def test_a_key_holding_terminal_escapes_is_shown_escaped_in_the_error_line(capsys, tmp_path):
    path = write_space(tmp_path, name="esc")
    path.write_text(path.read_text() + yaml.safe_dump({ESCAPES: 1}))
    code, _, err = shapesweep(capsys, "plan", str(path))
    line = one_line(code, err)
    _no_controls(err)
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\r" in line


def test_status_shows_store_text_escaped_and_never_as_markup(capsys, tmp_path):
    """A trial's `error` holding escape sequences and a variant named like rich markup, as
    `status` prints them: escaped, and literally."""
    import json

    from shapesweep.results.store import write_trial
    from shapesweep.search_spaces.accounting import account
    from shapesweep.search_spaces.configs import config_key, make_config

    config = make_config(dict(family="conventional", d_model=32, n_layers=2, n_heads=2, d_h=96))
    document = {"family": config.family, "model": config.model_dump(mode="json", exclude={"family"}),
                "train": dict(steps=3, seq_len=32, batch_tokens=256, eval_tokens=512, lr=1e-2)}
    for i, (status, error) in enumerate([("completed", None), ("failed", f"RuntimeError: {ESCAPES}")]):
        write_trial(str(tmp_path), "s", {
            "trial_id": f"t{i}", "key": config_key(config), "family": config.family,
            "variant": "[bold]wide[/bold]", "seed": i, "status": status,
            "val_loss": 2.0 if status == "completed" else None, "error": error,
            "config_json": json.dumps(document), **account(config, seq_len=32).to_dict()}, [])
    code, out, err = shapesweep(capsys, "status", "s", "--root", str(tmp_path))
    assert code == 0, err
    _no_controls(out + err)
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in out.replace("\n", "").replace("│", "").replace(" ", "")
    assert "[bold]wide[/bold]" in out  # shown as written, not read as a style


def test_the_live_box_and_progress_lines_escape_what_they_show():
    """The live display renders names and errors through the same console (`terminal_console`)."""
    import io

    from shapesweep.common import markup_safe, printable, terminal_console

    stream = io.StringIO()
    terminal_console(file=stream, width=200).print(f"[red]failed:[/] {markup_safe('[b]x' + ESCAPES)}")
    _no_controls(stream.getvalue())
    assert "[b]x\\x1b]0;pwned" in stream.getvalue()
    assert printable("tab\tand\nnewline") == "tab\tand\nnewline"
    assert printable("a\nb", one_line=True) == "a\\nb"
    assert printable("\ud800") == "\\ud800"


def test_plan_shows_a_variant_named_with_escapes_and_markup_as_written(capsys, tmp_path):
    from sweep_helpers import TINY_SPACE

    doc = {k: v for k, v in TINY_SPACE.items() if k != "search"}
    doc["variants"] = [{"name": "deep\x1b[2J[bold]x", "search": {"n_layers": [1, 2]}}]
    path = tmp_path / "esc.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, out, err = shapesweep(capsys, "plan", str(path))
    assert code == 0, err
    _no_controls(out + err)
    assert "deep\\x1b[2J[bold]x" in out
