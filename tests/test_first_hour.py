"""The README's "first hour", run as written: its commands, in order, on a fresh checkout.

The checkout holds exactly the files git tracks (what a clone holds: not a `best/` an earlier
first hour left in this tree), and its own venv sees this environment's packages through a
`.pth` line, so `make demo` finds its venv ready and nothing is downloaded. The one change to
the README's lines: the demo runs a quicker space (`DEMO_ARGS`), which the README says the
test does. The lines run twice in a row, as a user who comes back to them would.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from sweep_helpers import TINY_TRAIN

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

# The demo's flow on two tiny shapes and two seeds: a baseline and one other, so status has
# a comparison to print.
QUICK_SPACE = {
    "name": "demo-quick",
    "family": "conventional",
    "budget": {"match": {"n_layers": 2, "d_h": 64}, "tolerance": 0.05},
    "fixed": {"d_model": 32, "n_heads": 2, "vocab_size": 256, "activation": "swiglu"},
    "solve": "d_h",
    "variants": [{"name": "baseline", "fixed": {"n_layers": 2, "d_h": 64}, "solve": []},
                 {"name": "deep", "fixed": {"n_layers": 3}}],
    "train": TINY_TRAIN,
    "seeds": [0, 1],
}


def readme_first_hour() -> list[str]:
    """The command lines of the README's "Your first hour" block, comments stripped."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("### Your first hour"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def checkout(into: Path) -> Path:
    """The files a fresh clone of this tree would hold: the tracked ones, as they are now."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_symlink():  # shapesweep/sweep -> ../sweep: a link, as git keeps it
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            (into / name).symlink_to(source.readlink())
        elif source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def ready_venv(clone: Path) -> None:
    """clone/.venv with this environment's packages visible and the clone installed editable,
    marked installed so `make demo` does not set it up again. It gets no pip of its own
    (ensurepip takes seconds): the shared one installs the clone."""
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # every site-packages folder this interpreter reads: an environment that itself sees a shared
    # one through a .pth line passes that one on (a .pth line's folder reads no .pth of its own)
    shared = [p for p in dict.fromkeys([sysconfig.get_path("purelib"), *sys.path]) if p.endswith("site-packages")]
    Path(site, "shared-env.pth").write_text("".join(f"{p}\n" for p in shared))
    subprocess.run([str(python), "-m", "pip", "install", "-qq", "--no-deps", "-e", str(clone)],
                   check=True, cwd=clone)
    (venv / ".installed").touch()


def git(clone: Path, *argv: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *argv], cwd=clone,
                          capture_output=True, text=True, check=True).stdout


def test_the_readme_first_hour_runs_in_order_on_a_fresh_checkout(tmp_path):
    commands = readme_first_hour()
    assert commands[0] == "make demo" and any(" train " in c for c in commands), commands
    clone = checkout(tmp_path / "clone")
    (clone / "quick.yaml").write_text(yaml.safe_dump(QUICK_SPACE, sort_keys=False))
    ready_venv(clone)
    git(clone, "init", "-q")
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "the checkout")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(DEMO_ARGS="--space quick.yaml", PYTHONUNBUFFERED="1")
    for attempt in (1, 2):  # a second time: the demo resumes, the export replaces the first
        outputs = []
        for command in commands:
            run = subprocess.run(command, shell=True, cwd=clone, env=env, capture_output=True,
                                 text=True, timeout=900)
            assert run.returncode == 0, (f"attempt {attempt}: {command!r} exited {run.returncode}:\n"
                                         f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
            outputs.append(run.stdout)
        demo, _, status, export, train = outputs
        assert "Next:" in demo and ".venv/bin/shapesweep status demo-quick" in demo
        assert (clone / "sweeps" / "demo-report.html").stat().st_size > 100_000  # plotly inlined
        assert "baseline" in status and "deep" in status
        (best,) = (clone / "best").glob("01-*.yaml")  # one file, named by its variant
        assert best.name in ("01-baseline.yaml", "01-deep.yaml")
        assert re.search(r"val_loss", train), train[-2000:]
    # What the first hour wrote is all git-ignored: `git status` stays clean.
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""
    # The checkout's own code ran, not this tree's.
    probe = subprocess.run([str(clone / ".venv/bin/python"), "-c",
                            "import shapesweep.sweep.cli.main as c; print(c.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    assert probe.stdout.strip().startswith(str(clone))
