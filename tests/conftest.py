"""Fixtures shared across test modules."""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter

import pytest

# The environment this pytest process started with: the shared Ray's processes (its raylet, so
# every worker it starts) get this one, never a test's monkeypatched variables.
START_ENV = dict(os.environ)


class SharedRay:
    """One local Ray for every test of this pytest process (each xdist worker has its own)
    that needs a Ray but not a Ray of its own: started by the first, kept for the next, stopped
    for a test marked `own_ray` and at the end.

    Started and stopped by the driver's own `init_ray` and `stop_ray` (its CPUs, no dashboard,
    no prestarted workers, the retry of a slow start, the session folder removed after), inside
    `quiet()` as a sweep does, in the environment pytest started with. A sweep run in this
    process (`run(...)`) finds it started and uses it, as a driver uses a cluster it joins; a
    test whose trials must see variables it sets, or that checks the driver's own start, is
    marked `own_ray`."""

    def __init__(self) -> None:
        self.gcs_address: str | None = None
        self.session_dir: str | None = None

    def ours(self) -> bool:
        ray = sys.modules.get("ray")  # not imported: no Ray here
        return (ray is not None and ray.is_initialized()
                and ray.get_runtime_context().gcs_address == self.gcs_address)

    def start(self) -> None:
        import ray

        from shapesweep.sweep.driver.ray_session import init_ray, quiet

        if self.ours():
            return
        if ray.is_initialized():
            ray.shutdown()  # one a test left: its own, or a cluster it joined
        test_env = dict(os.environ)
        os.environ.clear()
        os.environ.update(START_ENV)
        try:
            with quiet():
                _, self.session_dir = init_ray(None)
        finally:
            os.environ.clear()
            os.environ.update(test_env)
        self.gcs_address = ray.get_runtime_context().gcs_address

    def stop(self) -> None:
        """Ours shut down, if it runs (a Ray a test started stays its own)."""
        if self.ours():
            from shapesweep.sweep.driver.ray_session import stop_ray

            stop_ray(self.session_dir)
        self.gcs_address = self.session_dir = None


@pytest.fixture(scope="session")
def shared_ray():
    ray = SharedRay()
    yield ray
    ray.stop()


@pytest.fixture
def local_ray(shared_ray):
    """The shared local Ray (`SharedRay`), started if it is not."""
    shared_ray.start()
    yield


@pytest.fixture(autouse=True, scope="module")
def _own_ray_module(request, shared_ray):
    """A module marked `own_ray` (`pytestmark`) finds no Ray in this process: before its
    module-scoped fixtures start one of their own."""
    if request.node.get_closest_marker("own_ray"):
        shared_ray.stop()


@pytest.fixture(autouse=True)
def _own_ray(request, shared_ray):
    """A test marked `own_ray` finds no Ray in this process."""
    if request.node.get_closest_marker("own_ray"):
        shared_ray.stop()


# The longest modules (benchmarks/data/suite-durations.txt's phases summed per module, as
# issue 54's cuts left them), longest first. The Makefile's two xdist workers take a module
# at a time (--dist loadfile) in collection order (--no-loadscope-reorder): these go out
# first, so the last modules handed out are short and the workers finish together. xdist's
# own order (most tests first) left the one-test end-to-end modules (mypy's ratchet, the
# lost node, the first hour) for the end, where one worker ran them while the other waited.
LONG_FIRST = ("test_hotpath", "test_integrity_driver", "test_slurm", "test_integrity_store",
              "test_multinode", "test_types", "test_checkpoints", "test_trackers", "test_fsdp",
              "test_compile", "test_sweep_more", "test_first_hour", "test_moe", "test_postgres",
              "test_sweep_run", "test_trial_threads", "test_adaptive_seeds",
              "test_dashboard_browser", "test_views_browser", "test_eval_cadence",
              "test_signals", "test_sequential", "test_optuna_outputs", "test_compact_kill")


def pytest_collection_modifyitems(config, items):
    """The modules of LONG_FIRST first, in its order, then the others as xdist would order
    them (most tests first); each module's tests stay together and in their order."""
    counts = Counter(item.path for item in items)
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: (rank.get(item.path.stem, len(rank)), -counts[item.path], str(item.path)))


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
