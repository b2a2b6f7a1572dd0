"""The type checker's ratchet (issue 54 item 5): mypy reports nothing outside the modules
pyproject lists as still untyped, and every module listed there still has an error, so the list
only shrinks. One mypy run with that list's silencing lifted tells both."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ERROR = re.compile(r"^(?P<path>shapesweep/[\w/]+)\.py:\d+(?::\d+)?: error:", re.MULTILINE)


def _ratchet(config: dict) -> list[str]:
    """The modules of the override that only sets `ignore_errors`."""
    found = [o for o in config.get("overrides", []) if o.get("ignore_errors")]
    assert len(found) == 1, "pyproject needs one [[tool.mypy.overrides]] with ignore_errors = true"
    modules = found[0]["module"]
    return [modules] if isinstance(modules, str) else list(modules)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value) if isinstance(value, int | float) else f'"{value}"'


def _without_ratchet(config: dict, path: Path) -> Path:
    """pyproject's mypy configuration minus the ratchet's override, as a TOML file."""
    lines = ["[tool.mypy]", *(f"{k} = {_toml(v)}" for k, v in config.items() if k != "overrides")]
    for override in config.get("overrides", []):
        if not override.get("ignore_errors"):
            lines += ["[[tool.mypy.overrides]]", *(f"{k} = {_toml(v)}" for k, v in override.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow  # a whole mypy run, cold in a fresh checkout (324 s at load 15); `make lint`
# type-checks in the inner loop, this ratchet's bookkeeping runs in `make test` (CI)
def test_mypy_errors_only_in_the_listed_modules_and_in_each_of_them(tmp_path):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    listed = _ratchet(config)
    assert listed == sorted(set(listed)), "keep the ratchet's modules sorted, each once"
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "-p", "shapesweep", "--no-error-summary",
         "--config-file", str(_without_ratchet(config, tmp_path / "mypy.toml")),
         "--cache-dir", str(ROOT / ".mypy_cache" / "ratchet")],
        cwd=ROOT, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    with_errors = {m["path"].replace("/", ".") for m in ERROR.finditer(done.stdout)}
    unlisted = [line for line in done.stdout.splitlines()
                if (m := ERROR.match(line)) and m["path"].replace("/", ".") not in listed]
    assert not unlisted, "type errors outside pyproject's ratchet list:\n" + "\n".join(unlisted)
    clean = sorted(set(listed) - with_errors)
    assert not clean, ("typed now: delete these from pyproject's [[tool.mypy.overrides]] "
                       "ignore_errors list:\n" + "\n".join(clean))
