"""`run` refuses a comparison with the baseline whose measure seeds cannot give it a verdict
(issue 55.2): one line naming the seeds that would and the `plan` that prices them, exit 2,
nothing written; `--no-verdict` runs it, and `resume` does not refuse it again (the flag is
kept in sweep.json). A search without a baseline runs as before. `run --dry-run` and
`resume --dry-run` check without writing (55.3). In-process; the one real sweep is slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_helpers import TWO_SHAPES, run, write_space

from shapesweep.results.parquet_store import ParquetStore
from shapesweep.sweep.cli.main import main
from shapesweep.sweep.driver.sweep_files import OPTIONS_FILE, SPACE_FILE
from shapesweep.sweep.options.sweep_options import SweepOptions

COMPARED = {**TWO_SHAPES, "name": "compared", "seeds": [0]}  # on one measure seed


def shapesweep(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_one_measure_seed_is_refused_in_one_line_naming_the_seeds_that_would(tmp_path, capsys):
    space, root = write_space(tmp_path, COMPARED), tmp_path / "sweeps"
    code, out, err = shapesweep(capsys, "run", str(space), "--root", str(root), "--no-progress")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert "--seeds: 1 measure seed cannot give" in err
    assert "give --seeds 2 (seeds 0,1" in err and f"shapesweep plan {space} --seeds 2" in err
    assert "--no-verdict" in err and not root.exists()  # refused before any work


@pytest.mark.parametrize("argv", [["--no-verdict"], ["--seeds", "2"], ["--search", "optuna"]],
                         ids=["no-verdict", "two-seeds", "optuna"])
def test_what_runs_the_comparison_or_is_none_passes_the_dry_run(tmp_path, capsys, argv):
    space, root = write_space(tmp_path, COMPARED), tmp_path / "sweeps"
    code, out, err = shapesweep(capsys, "run", str(space), "--root", str(root), "--dry-run", *argv)
    assert code == 0, err
    assert "dry run: sweep compared passes every check" in out and "price:" in out
    assert not root.exists()  # nothing written


def test_a_stated_effect_asks_for_the_seeds_its_power_needs(tmp_path, capsys):
    space, root = write_space(tmp_path, COMPARED), tmp_path / "sweeps"
    argv = ["run", str(space), "--root", str(root), "--dry-run", "--min-effect", "0.02"]
    code, _, err = shapesweep(capsys, *argv, "--seeds", "2")
    assert code == 2 and "for 80% power at 0.02 nats" in err, err
    needed = int(err.split("give --seeds ")[1].split()[0])
    assert needed > 2
    assert shapesweep(capsys, *argv, "--seeds", str(needed))[0] == 0
    assert not root.exists()


def test_dry_run_refuses_what_run_would_and_checks_gpus_against_the_named_ones(tmp_path, capsys):
    space, root = write_space(tmp_path, COMPARED), tmp_path / "sweeps"
    base = ["run", str(space), "--root", str(root), "--seeds", "2", "--dry-run"]
    code, _, err = shapesweep(capsys, *base, "--scheduler", "asha", "--grace-tokens", "1M")
    assert code == 2 and "--grace-tokens" in err  # the scheduler's check
    code, _, err = shapesweep(capsys, *base, "--workers-per-trial", "4", "--gpus-per-trial", "1",
                              "--gpus", "2")
    assert code == 2 and "4 workers x 1 GPUs do not fit the 2 GPUs --gpus names" in err
    code, out, err = shapesweep(capsys, *base, "--gpus-per-trial", "0.5", "--gpus", "2",
                                "--gpu", "a100", "--gpu-hour-price", "2")
    assert code == 0 and "A100" in out and "at 2 a GPU-hour" in out, err
    code, _, err = shapesweep(capsys, "run", str(space), "--root", str(root), "--gpus", "2")
    assert code == 2 and "--gpus: prices a dry run" in err
    assert not root.exists()


def test_resume_dry_run_of_a_sweep_that_does_not_exist_is_one_line(tmp_path, capsys):
    root = tmp_path / "sweeps"
    code, out, err = shapesweep(capsys, "resume", "nothing", "--root", str(root), "--dry-run")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert "nothing" in err and not root.exists()


def saved_sweep(tmp_path: Path, **options) -> Path:
    """A sweep folder as `run` leaves it once started (its space and options files), through
    the real store; no trial has run."""
    root = tmp_path / "sweeps"
    space = write_space(tmp_path, COMPARED)
    store = ParquetStore(str(root))
    store.write_file("compared", SPACE_FILE, space.read_text())
    from shapesweep.sweep.options.fields import saved_values

    saved = saved_values(SweepOptions(space=SPACE_FILE, root=str(root), **options))
    store.write_file("compared", OPTIONS_FILE, json.dumps(saved))
    return root


@pytest.mark.parametrize("keep", [True, False], ids=["started-with-no-verdict", "from-before"])
def test_resume_does_not_refuse_again_what_run_was_told_to_run(tmp_path, capsys, keep):
    root = saved_sweep(tmp_path, no_verdict=True)
    if not keep:  # a sweep from before the check: its options file has no such key
        path = Path(ParquetStore(str(root)).file_location("compared", OPTIONS_FILE))
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items()
                                    if k != "no_verdict"}))
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    code, out, err = shapesweep(capsys, "resume", "compared", "--root", str(root), "--dry-run")
    assert code == 0 and "dry run: sweep compared passes" in out, err
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing written


def test_resume_refuses_a_saved_comparison_without_a_verdict_not_told_to_run(tmp_path, capsys):
    root = saved_sweep(tmp_path)  # `no_verdict: false` kept, as `run` would never have started it
    code, _, err = shapesweep(capsys, "resume", "compared", "--root", str(root), "--dry-run")
    assert code == 2 and "cannot give the comparison" in err


@pytest.mark.slow
def test_a_sweep_run_with_no_verdict_keeps_it_and_resumes(tmp_path, local_ray):
    """Real Ray: `run --no-verdict` trains the comparison on one seed, keeps the flag, and
    `resume` finishes it without refusing it again."""
    space, root = write_space(tmp_path, COMPARED), tmp_path / "sweeps"
    assert run("run", str(space), "--root", str(root), "--no-verdict", "--scheduler", "fifo",
               "--max-concurrent", "2") == 0
    saved = json.loads(ParquetStore(str(root)).read_file("compared", OPTIONS_FILE))
    assert saved["no_verdict"] is True and "dry_run" not in saved
    assert run("resume", "compared", "--root", str(root)) == 0
