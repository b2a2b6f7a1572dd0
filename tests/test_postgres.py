"""Catalog + Optuna storage on a real PostgreSQL server (issue 6, cluster guide).

A throwaway server from Debian's packages runs on loopback (tests/pg_server.py); a tiny
Optuna sweep (real Ray, real tiny training) stores its catalog row and its study there,
its trial rows go to the Parquet store, and `resume` with nothing missing runs nothing.
`make postgres` (a prerequisite of `make test`) installs the package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pg_server import find_bin_dir, start_server
from sweep_helpers import TINY_SPACE
from sweep_helpers import write_space as write_tiny_space

from shapesweep.results.catalog import Catalog
from shapesweep.results.store import load_trials, sweep_dir
from shapesweep.sweep.cli.main import main as shapesweep

pytestmark = pytest.mark.slow

# n_layers >= 8 cannot meet the budget, so Optuna prunes them.
SPACE = {**TINY_SPACE, "name": "pg-optuna", "search": {"n_layers": [1, 2, 3, 4, 8, 10]}}
SAMPLES = 3


@pytest.fixture(scope="module")
def postgres():
    bin_dir = find_bin_dir()
    if bin_dir is None:
        if os.environ.get("CI"):  # CI installs it (`make postgres`): missing there is a failure
            pytest.fail("PostgreSQL is not installed, but CI must run this test", pytrace=False)
        pytest.skip("PostgreSQL is not installed here: `make postgres` installs Debian's "
                    "postgresql package (needs root and apt)")
    server = start_server(bin_dir)
    try:
        yield server
    finally:
        server.stop()


def write_space(folder: Path, **changes) -> Path:
    return write_tiny_space(folder, SPACE, **changes)


def catalog_rows(url: str) -> list[dict]:
    """The catalog table read with plain SQL, not through the Catalog class under test."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            result = connection.execute(text(
                "SELECT name, status, n_candidates FROM shapesweep_sweeps ORDER BY name"))
            return [dict(row._mapping) for row in result]
    finally:
        engine.dispose()


def parquet_row_count(root: Path, sweep: str) -> int:
    """Every row of every trials fragment on disk (no dedupe), to prove nothing was added."""
    import pyarrow.dataset as ds

    return ds.dataset(str(Path(sweep_dir(str(root), sweep)) / "trials"),
                      format="parquet").count_rows()


def test_optuna_sweep_with_postgres_storage_then_resume_runs_nothing(postgres, local_ray,
                                                                     tmp_path, monkeypatch):
    import optuna
    from optuna.trial import TrialState

    url = postgres.create_database("sweeps")
    root = tmp_path / "sweeps"
    space_path = write_space(tmp_path)
    assert shapesweep(["run", str(space_path), "--root", str(root), "--search", "optuna",
                       "--num-samples", str(SAMPLES), "--storage", url, "--scheduler", "fifo",
                       "--max-concurrent", "2", "--no-progress"]) == 0

    # The catalog row is in PostgreSQL, and no SQLite catalog was made beside the results.
    assert catalog_rows(url) == [{"name": "pg-optuna", "status": "finished",
                                  "n_candidates": SAMPLES}]
    assert not (root / "shapesweep.db").exists()

    # The study is in PostgreSQL: its completed trials are the Parquet rows, value for value.
    study = optuna.load_study(study_name="pg-optuna", storage=url)
    ran = [t for t in study.trials
           if t.state == TrialState.COMPLETE and "duplicate_of" not in t.user_attrs]
    assert len(ran) == SAMPLES
    for t in study.trials:
        if t.params["n_layers"] >= 8:
            assert t.state == TrialState.PRUNED and t.user_attrs.get("infeasible")
    trials = load_trials(str(root), ["pg-optuna"])
    assert sorted(trials["trial_id"]) == sorted(t.user_attrs["trial_id"] for t in ran)
    assert (trials["status"] == "completed").all() and (trials["tokens"] == SPACE["train"]["tokens"]).all()
    for t in ran:
        row = trials[trials["trial_id"] == t.user_attrs["trial_id"]].iloc[0]
        assert t.value == pytest.approx(row["val_loss"])
        assert row["n_layers"] == t.params["n_layers"]
    assert parquet_row_count(root, "pg-optuna") == SAMPLES

    # Nothing is missing, so resume launches no trial and adds no row or study trial.
    trials_before = len(study.trials)
    assert shapesweep(["resume", "pg-optuna", "--root", str(root), "--storage", url,
                       "--no-progress"]) == 0
    assert parquet_row_count(root, "pg-optuna") == SAMPLES
    assert len(optuna.load_study(study_name="pg-optuna", storage=url).trials) == trials_before
    assert [row["status"] for row in catalog_rows(url)] == ["finished"]
    # sweep.json keeps the URL but never its password; without --storage, resume reuses that
    # URL and takes the password from the environment (PGPASSWORD or ~/.pgpass), as libpq does.
    from sqlalchemy.engine import make_url

    password = make_url(url).password
    saved = (root / "pg-optuna" / "sweep.json").read_text()
    assert password and password not in saved and "127.0.0.1" in saved
    monkeypatch.setenv("PGPASSWORD", password)
    assert shapesweep(["resume", "pg-optuna", "--root", str(root), "--no-progress"]) == 0
    assert parquet_row_count(root, "pg-optuna") == SAMPLES
    assert not (root / "shapesweep.db").exists()


def test_different_space_under_the_same_name_is_refused_on_postgres(postgres, tmp_path, capsys):
    url = postgres.create_database("refused")
    Catalog(url).register("pg-optuna", "other", "name: other\n", "0123456789ab", 3)
    code = shapesweep(["run", str(write_space(tmp_path)), "--root", str(tmp_path / "sweeps"),
                       "--storage", url, "--no-progress"])
    assert code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "different search space" in error[0]
    assert [row["name"] for row in catalog_rows(url)] == ["pg-optuna"]


def _files_holding(secret: bytes, *folders: Path) -> list[str]:
    """Every regular file under `folders` whose bytes (text, pickles, logs) contain `secret`."""
    found, seen = [], 0
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                seen += 1
                try:
                    if secret in path.read_bytes():
                        found.append(str(path))
                except OSError:  # a socket or a file removed meanwhile
                    pass
    assert seen, f"no file to search under {folders}"
    return found


def test_no_file_the_sweep_or_ray_writes_holds_the_storage_password(postgres, tmp_path):
    """An Optuna sweep with a PostgreSQL URL holding a unique password, on a real `ray start`
    head whose session folder (logs, pickles, spilled objects) stays for the search: neither
    the sweep's root, nor Ray's folders, nor the driver's temp folder holds it afterwards."""
    import tempfile

    from ray_nodes import TEST_ENV, start_head, stop_node
    from sqlalchemy.engine import make_url
    from sweep_helpers import CHILD_ENV

    url = postgres.create_database("secret")
    password = make_url(url).password
    assert len(password) >= 32  # unique per server: found only if something wrote it
    root, driver_tmp = tmp_path / "sweeps", tmp_path / "driver-tmp"
    driver_tmp.mkdir()
    ray_tmp = Path(tempfile.mkdtemp(prefix="ss-pw-"))  # short: Ray's socket paths must fit
    env = {**CHILD_ENV, **TEST_ENV, "TMPDIR": str(driver_tmp)}
    head = None
    try:
        head, address = start_head(ray_tmp, 2, env)
        driver = subprocess.run(
            [sys.executable, "-m", "shapesweep.sweep.cli", "run", str(write_space(tmp_path)),
             "--root", str(root), "--search", "optuna", "--num-samples", "2", "--storage", url,
             "--scheduler", "fifo", "--address", address, "--no-progress"],
            env=env, capture_output=True, text=True, timeout=300)
        assert driver.returncode == 0, driver.stderr[-2000:]
        assert list((root / "pg-optuna" / "_ray").glob("*/tuner.pkl"))  # Tune's pickles were written
        assert _files_holding(password.encode(), root, ray_tmp, driver_tmp) == []
    finally:
        if head is not None:
            stop_node(head)
        shutil.rmtree(ray_tmp, ignore_errors=True)
