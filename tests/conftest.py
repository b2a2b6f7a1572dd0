"""Fixtures shared across test modules."""

from __future__ import annotations

import signal

import pytest


@pytest.fixture(scope="module")
def local_ray():
    """An in-process local Ray with this machine's 2 CPUs, shut down after the module."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    yield
    ray.shutdown()


HOSTILE = "<script>alert(1)</script>"  # a user-supplied name that must render as text


@pytest.fixture(scope="module")
def synthetic_store(tmp_path_factory) -> str:
    """Three sweeps through the real results store, a hostile space name and error text."""
    from synthetic import synthetic_sweep, write_synthetic

    from shapesweep.results.catalog import Catalog, default_catalog_url
    from shapesweep.results.store import write_trial

    root = str(tmp_path_factory.mktemp("store"))
    write_synthetic(root, "ucurve", 10_000, families=("conventional", "hourglass"), budgets=(113e6,),
                    grid_ratios=6, seeds=2)
    write_synthetic(root, "shapes", 10_000, families=("conventional", "variable_width"), budgets=(30e6,),
                    grid_ratios=4, seeds=2, seed=1)
    write_synthetic(root, "mlp", 24, families=("vision_mlp",), budgets=(3e8,), seed=2)
    Catalog(default_catalog_url(root)).register("shapes", HOSTILE, "name: x", "hash", 8)
    row, curves = synthetic_sweep("shapes", 1, families=("conventional",), seed=9)[0]
    row.update(trial_id="hostile", status="failed", error=f"RuntimeError: {HOSTILE}", val_loss=None)
    write_trial(root, "shapes", row, [{**c, "trial_id": "hostile"} for c in curves[:2]])
    return root


@pytest.fixture
def one_torch_thread(tmp_path_factory, monkeypatch):
    """Tiny models run fastest (and identically) on one thread, even on a busy machine;
    the data cache lives in the session's temp folder."""
    import torch

    monkeypatch.setenv("SHAPESWEEP_CACHE", str(tmp_path_factory.getbasetemp() / "shapesweep-cache"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def python_ctrl_c():
    """Each test starts with Python's own Ctrl-C handler. A library that leaves SIGINT
    replaced, or ignored (which child processes inherit), would otherwise break the Ctrl-C
    tests that happen to run after it."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
