"""The sweep catalog on a real SQLite file, shared with a real Optuna storage."""

from __future__ import annotations

import multiprocessing

import optuna
import pytest
import sqlalchemy

from shapesweep.common import UserError
from shapesweep.results import SWEEP_STATUSES, Catalog, default_catalog_url

SPACE = "name: tiny\nfamily: hourglass\n"


def test_register_get_list_and_reopen(tmp_path):
    url = default_catalog_url(tmp_path / "store")
    assert url == f"sqlite:///{tmp_path / 'store' / 'shapesweep.db'}"
    catalog = Catalog(url)
    first = catalog.register("alpha", "tiny", SPACE, "hash-a", 12)
    assert (first.name, first.space_name, first.space_yaml, first.n_candidates) == (
        "alpha", "tiny", SPACE, 12)
    assert first.status == "created"
    assert first.created_at.tzinfo is not None
    catalog.register("beta", "other", "name: other\n", "hash-b", 3)
    again = catalog.register("alpha", "tiny", SPACE, "hash-a", 12)  # same space: the same sweep
    assert again == first
    assert [s.name for s in catalog.list()] == ["alpha", "beta"]
    assert catalog.get("missing") is None

    reopened = Catalog(url)  # a new engine on the same file sees everything
    assert reopened.get("beta").space_hash == "hash-b"
    assert (tmp_path / "store" / "shapesweep.db").is_file()


def test_different_space_under_same_name_is_refused(tmp_path):
    catalog = Catalog(default_catalog_url(tmp_path))
    catalog.register("alpha", "tiny", SPACE, "hash-a", 12)
    with pytest.raises(UserError, match=r"'alpha' already exists with a different search space.*--name"):
        catalog.register("alpha", "bigger", "name: bigger\n", "hash-z", 40)
    assert catalog.get("alpha").space_hash == "hash-a" and len(catalog.list()) == 1
    with pytest.raises(UserError, match="not allowed"):
        catalog.register("../escape", "tiny", SPACE, "hash-a", 1)


def test_a_sweep_registered_by_an_older_version_is_the_same_space(tmp_path):
    # An older version hashed the parsed space without a key added since (at its default):
    # the saved text, hashed as this version parses it, decides.
    catalog = Catalog(default_catalog_url(tmp_path))
    catalog.register("alpha", "tiny", SPACE, "hash-old", 12)
    today = {SPACE: "hash-new"}

    def hash_now(text):
        if text not in today:
            raise UserError("no longer parses")
        return today[text]

    assert catalog.register("alpha", "tiny", SPACE, "hash-new", 12, hash_now=hash_now).name == "alpha"
    with pytest.raises(UserError, match="different search space"):
        catalog.register("alpha", "tiny", SPACE, "hash-other", 12, hash_now=hash_now)
    today.clear()  # a saved text this version refuses is another space
    with pytest.raises(UserError, match="different search space"):
        catalog.register("alpha", "tiny", SPACE, "hash-new", 12, hash_now=hash_now)


def test_status(tmp_path):
    catalog = Catalog(default_catalog_url(tmp_path))
    created = catalog.register("alpha", "tiny", SPACE, "hash-a", 12)
    for status in SWEEP_STATUSES:
        assert catalog.set_status("alpha", status).status == status
    assert catalog.get("alpha").status == "failed"
    record = catalog.get("alpha")
    assert Catalog(catalog.url).get("alpha") == record and record.updated_at >= created.updated_at
    with pytest.raises(ValueError, match="not one of"):
        catalog.set_status("alpha", "paused")
    with pytest.raises(UserError, match="no sweep named 'nope'"):
        catalog.set_status("nope", "running")


def test_shares_the_optuna_database_without_clashing(tmp_path):
    url = default_catalog_url(tmp_path)
    study = optuna.create_study(storage=url, study_name="alpha")
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    catalog = Catalog(url)
    catalog.register("alpha", "tiny", SPACE, "hash-a", 2)
    tables = set(sqlalchemy.inspect(catalog.engine).get_table_names())
    assert {"shapesweep_sweeps", "studies", "trials"} <= tables
    assert all(t.startswith("shapesweep_") for t in tables - _optuna_tables(tmp_path))
    loaded = optuna.load_study(storage=url, study_name="alpha")
    assert len(loaded.trials) == 2 and catalog.get("alpha").n_candidates == 2


def _optuna_tables(tmp_path) -> set[str]:
    url = default_catalog_url(tmp_path / "optuna_only")
    optuna.create_study(storage=url, study_name="probe")
    return set(sqlalchemy.inspect(sqlalchemy.create_engine(url)).get_table_names())


def test_catalog_url_for_uri_roots(tmp_path):
    with pytest.raises(UserError, match="--storage"):
        default_catalog_url("s3://bucket/sweeps")
    url = default_catalog_url(f"file://{tmp_path}/uri")
    assert url == f"sqlite:///{tmp_path}/uri/shapesweep.db"
    Catalog(url).register("alpha", "tiny", SPACE, "hash-a", 1)
    assert (tmp_path / "uri" / "shapesweep.db").is_file()


def _register(url: str, results) -> None:
    record = Catalog(url).register("race", "tiny", SPACE, "hash-a", 5)
    results.put(record.name)


def test_concurrent_registration_of_one_name(tmp_path):
    url = default_catalog_url(tmp_path)
    context = multiprocessing.get_context("fork")  # each child opens its own engine
    results = context.Queue()
    processes = [context.Process(target=_register, args=(url, results)) for _ in range(3)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert sorted(results.get(timeout=5) for _ in processes) == ["race"] * 3
    assert [s.name for s in Catalog(url).list()] == ["race"]
