"""The type checker holds the whole package (issue 54 item 5): mypy, with pyproject's
configuration, reports no error in any module, and no override silences one. `make lint` runs
the same check in the inner loop; this test runs it in `make test`, so CI holds it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_no_module_has_its_type_errors_silenced():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    silenced = [o for o in config.get("overrides", []) if o.get("ignore_errors")]
    assert not silenced, f"pyproject silences mypy for {silenced}: type those modules instead"
    assert not config.get("ignore_errors"), "pyproject silences mypy for the whole package"


@pytest.mark.slow  # a whole mypy run, cold in a fresh checkout (about 90 s quiet)
def test_mypy_reports_no_error_in_the_package():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "-p", "shapesweep", "--no-error-summary",
         "--cache-dir", str(ROOT / ".mypy_cache" / "ci")],
        cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
