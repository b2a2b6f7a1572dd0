"""The one door to Ray's internals: every private Ray name, monkeypatch and environment
setting the sweep relies on, one small function each, so that a Ray upgrade is checked here.

Each was written for Ray 2.60 (the range pyproject.toml allows is the one tested);
`tests/test_ray_compat.py` has a test per workaround that fails the day Ray changes what it
relies on, and a scan of the package's source that finds private Ray names only here.
Ray itself is imported inside the functions: the driver's start-up imports what it uses.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from shapesweep.common import environment

if TYPE_CHECKING:  # types only: Ray is imported where it is used (the module docstring)
    from ray.air.integrations.mlflow import MLflowLoggerCallback
    from ray.air.integrations.wandb import WandbLoggerCallback
    from ray.tune.experiment import Trial
    from ray.tune.logger import TBXLoggerCallback

WandbCallback = TypeVar("WandbCallback", bound="WandbLoggerCallback")

QUIET_ENV = {
    # Tune's loggers are chosen by `_ray_loggers` (json + csv, so ResultGrid and
    # ExperimentAnalysis read the sweep; TensorBoard files only with --log-to tensorboard).
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
    "TUNE_DISABLE_SIGINT_HANDLER": "1",  # Ctrl-C reaches us: we mark the sweep interrupted
    "RAY_DEDUP_LOGS": "0",
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "1000",
}


@contextmanager
def quiet_environment() -> Iterator[None]:
    """Ray's and Tune's environment settings for a sweep (QUIET_ENV, each where the user set
    none), undone when it ends. Ray 2.60 reads them as it runs (`RAY_DEDUP_LOGS` when `ray`
    is imported: so in the processes it starts after this, not in an importing driver);
    Ray has no argument for any of them."""
    with environment({k: v for k, v in QUIET_ENV.items() if k not in os.environ}):
        yield


def without_prestarted_workers() -> dict[str, Any]:
    """`ray.init` arguments for a local Ray that starts no idle worker per CPU with the
    driver: they compete with `ray.init` for the CPU, and Tune starts its actors' own
    (bench_sweep_overhead measures it). Ray 2.60: a private `_system_config` key (an unknown
    one stops Ray's GCS from starting)."""
    return {"_system_config": {"prestart_worker_first_driver": False}}


def use_cluster_token() -> None:
    """Authenticate to a cluster the way `ray start` does.

    Ray 2.5x (written for 2.60) starts a head with token auth when RAY_AUTH_MODE is unset and
    a token exists (~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH), but a driver
    joining it does not send that token unless told to. This applies Ray's own rule (an
    explicit RAY_AUTH_MODE wins) and refreshes Ray's cached config, which an env var alone
    cannot. A Ray without token auth is left as it is.
    """
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token auth
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def kill_autoscaler_monitor() -> bool:
    """Kill the autoscaler monitor of the local Ray this process started; whether there was
    one to kill. `ray.shutdown` stops it after GCS, when it no longer exits on SIGTERM, so
    Ray waits a second and kills it anyway: most of a sweep's wind-down. Ray 2.60: the
    private `ray._private.worker._global_node.kill_monitor`, how Ray's own tests kill it."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    kill_monitor = getattr(node, "kill_monitor", None)
    if kill_monitor is None:
        return False
    kill_monitor(check_alive=False)
    return True


@contextmanager
def no_callback_census() -> Iterator[None]:
    """`Tuner.fit` without Tune's count of its callbacks for Ray's usage telemetry, which
    imports every tracker integration Ray ships (MLflow, W&B, Comet, Aim) to tell their
    classes apart: 1.1 s of every sweep's start-up and 0.3 s of its exit here, with or
    without a tracker (`bench_sweep_overhead` measures the start-up). Ray 2.60: a
    monkeypatch of the private `ray.air._internal.usage.tag_callbacks`, which Tune calls
    through its module. A Ray without that census is left as it is."""
    # Tune imports it with itself; Any: a private module, patched by name
    usage: Any = sys.modules.get("ray.air._internal.usage")
    census = getattr(usage, "tag_callbacks", None)
    if census is None:
        yield
        return
    usage.tag_callbacks = lambda callbacks: False
    try:
        yield
    finally:
        usage.tag_callbacks = census


def placement_group_cleaner() -> type | None:
    """Ray Train v2's `PlacementGroupCleanerCallback` (private, Ray 2.60:
    ray/train/v2/_internal/callbacks/placement_group_callback.py); None in a Ray without it."""
    try:
        from ray.train.v2._internal.callbacks.placement_group_callback import (
            PlacementGroupCleanerCallback,
        )
    except ImportError:
        return None
    return PlacementGroupCleanerCallback


def without_placement_group_cleaner(trainer: type) -> type:
    """`trainer` (a Ray Train v2 trainer class) without the placement-group cleaner; the
    class itself where Ray has no such callback or no `_create_default_callbacks`.

    Ray Train v2 (Ray 2.60) starts, with every run, a detached `PlacementGroupCleaner` actor
    that polls the controller's liveness through the State API (`ray.util.state.get_actor`,
    timeout 10 s), so it can remove the worker group's placement group if the controller
    dies. The State API is served by Ray's dashboard, which a sweep's local Ray runs without
    (`include_dashboard=False`; `ray[tune]` does not ship it): each poll then waits out its
    timeout, and stopping the cleaner at the end of every run waits for the poll in flight,
    ~12 s per data-parallel trial (`benchmarks/bench_train_stop.py` measures it). Ray has
    no setting for this.

    So in the local Ray a sweep starts for itself (no dashboard), data-parallel trials run
    without that callback: there it could never see a controller die anyway (every query
    fails), and a run that ends removes its placement group itself, as does the end of the
    sweep's job for one that did not. On a cluster (`--address`, which may serve the State
    API), or a Ray started by someone else, Ray's default stays.
    """
    found = placement_group_cleaner()
    if found is None or not hasattr(trainer, "_create_default_callbacks"):
        return trainer
    cleaner: type = found

    class WithoutCleaner(trainer):
        def _create_default_callbacks(self) -> list[Any]:
            return [c for c in super()._create_default_callbacks() if not isinstance(c, cleaner)]

    WithoutCleaner.__name__ = WithoutCleaner.__qualname__ = trainer.__name__
    return WithoutCleaner


# Ray's tracker callbacks keep each trial's run in a private dict, which a subclass that tags
# a run with how its trial ended must read (Ray 2.60; Ray offers no accessor).

def mlflow_run_id(callback: MLflowLoggerCallback, trial: Trial) -> str:
    """The MLflow run id `MLflowLoggerCallback` opened for `trial` (its `_trial_runs`)."""
    return callback._trial_runs[trial]


def wandb_logging(callback: WandbLoggerCallback, trial: Trial) -> bool:
    """Whether `WandbLoggerCallback` has a logging actor's queue for `trial` (its
    `_trial_queues`): only then does it take a result."""
    return trial in callback._trial_queues


def tensorboard_writer(callback: TBXLoggerCallback, trial: Trial) -> Any:
    """The SummaryWriter `TBXLoggerCallback` opened for `trial` (its `_trial_writer`);
    None before its first result."""
    return callback._trial_writer.get(trial)


@contextmanager
def local_ray_start() -> Iterator[None]:
    """While `ray.init` starts a local Ray: its processes in a process group of their own,
    and Ray's SIGTERM handler left out of the driver.

    A signal to the driver's process group (`kill -TERM -PGID`, a closed terminal, a job
    scheduler) would otherwise also reach Ray's GCS and raylet: they exit at once, and the
    driver's core worker then ends the process with exit 1 before the sweep can mark itself
    interrupted. Their own group leaves the driver to stop them (`ray.shutdown`), as Ray
    does on Windows (`ConsolePopen`'s CREATE_NEW_PROCESS_GROUP), and only where the kernel
    kills them with a killed driver (fate sharing: PR_SET_PDEATHSIG), which a group would
    otherwise do. Ray's handler (kill its processes, exit 1) is left out: the driver's
    (SIGTERM as Ctrl-C) stops them. Ray 2.60: the private `services.ConsolePopen`, and
    `utils.set_sigterm_handler`, which `Node` calls at start."""
    from ray._private import services, utils

    popen, set_handler = services.ConsolePopen, utils.set_sigterm_handler
    if sys.platform.startswith("linux") and utils.detect_fate_sharing_support():

        class OwnGroupPopen(services.ConsolePopen):
            # Popen's own arguments, passed on as they are
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs.setdefault("process_group", 0)
                super().__init__(*args, **kwargs)

        services.ConsolePopen = OwnGroupPopen  # type: ignore[misc]  # a class of Ray's, patched
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        services.ConsolePopen, utils.set_sigterm_handler = popen, set_handler  # type: ignore[misc]  # restored


def ray_temp_dir() -> str:
    """The folder a local Ray started now keeps its session folders in ($RAY_TMPDIR/ray,
    else $TMPDIR/ray, else /tmp/ray). Ray 2.60: the private
    `ray._common.utils.get_default_ray_temp_dir`."""
    from ray._common.utils import get_default_ray_temp_dir

    return get_default_ray_temp_dir()


def wandb_files_written(callback_cls: type[WandbCallback]) -> type[WandbCallback]:
    """`WandbLoggerCallback` (a subclass of it) whose logging actors end only once their run's
    file is written (its `_logger_actor_cls`).

    `wandb.finish` hands the run's records to wandb-core and returns before they are written
    (W&B 0.31, offline: the .wandb file is still its 7-byte header); Ray kills the actor, and
    with it wandb-core, as soon as the actor's `run` returns, so on a loaded machine a run's
    file could keep nothing but its header. `wandb.teardown` waits for wandb-core to write it.
    """
    from ray.air.integrations.wandb import _WandbLoggingActor

    class LoggingActor(_WandbLoggingActor):
        def run(self):
            import wandb

            try:
                super().run()
            finally:
                wandb.teardown()

    callback_cls._logger_actor_cls = LoggingActor
    return callback_cls
