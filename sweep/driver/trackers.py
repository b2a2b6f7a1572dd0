"""Experiment trackers a sweep logs to (`shapesweep run --log-to mlflow|wandb|tensorboard`).

Each is Ray Tune's own logger callback, adapted in one way: one tracker run per trial,
named by our trial id (`KEY-sSEED`, via Tune's trial name), tagged with the sweep, the
family and every shape field, whose metric history is the learning curve (one point per
evaluation, at its token count). The final summary report adds only what the curve lacks
(tokens_per_s, best_val_loss, ...), so no curve point is logged twice. When the trial
ends, its run is tagged `status` = completed / stopped_early / failed, as its row says
(an MLflow tag, a W&B config value, a TensorBoard text summary).

Where each one writes is the tracker's own setting: MLFLOW_TRACKING_URI, WANDB_PROJECT /
WANDB_DIR / WANDB_MODE; TensorBoard event files go to the trial folders under ROOT/NAME/_ray.
Those settings are checked before the sweep starts (`check_trackers`): MLflow's store is
opened as the callback will open it, so a bad or file-store URI is one line, not a failed
sweep. Trackers log in the driver while the trial waits for it (Tune's reporting is
synchronous); the loop keeps that wait out of the trial's times (`trainers/loop.py`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict

from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.result import TIMESTEPS_TOTAL, TRAINING_ITERATION

from shapesweep.common import UserError, environment
from shapesweep.results.rows import CURVE_FIELDS
from shapesweep.search_spaces.solver import SHAPE_COLUMNS
from shapesweep.sweep.driver import ray_compat
from shapesweep.sweep.driver.trainable import FINAL_FLAG

Ended = Callable[[Trial], str]  # a trial that did not fail -> completed / stopped_early
STATUS_TAG = "status"  # completed / stopped_early / failed, as the trial's row says
MLFLOW_CHECK_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


@dataclass(frozen=True)
class Tracker:
    module: str  # what must be importable
    extra: str  # the pip extra that installs it
    # (sweep name, sweep folder, how a trial that did not fail ended) -> Tune callback
    make: Callable[[str, str, Ended], Callback]
    check: Callable[[], None] = lambda: None  # refuses its settings (UserError) before any work


def trial_status(ended: Ended, trial: Trial, failed: bool) -> str:
    """How the trial ended, as its row says: `ended` (the driver's own rule,
    `shapesweep.sweep.driver.runner.ended_as`) tells completed from stopped_early."""
    return "failed" if failed else ended(trial)


def trial_tags(sweep: str, trial: Trial) -> dict[str, str]:
    """Sweep, family, ids and every shape field of the trial's candidate, as strings."""
    spec = trial.config["spec"]
    row = spec["row"]
    shape = {name: row[name] for name in SHAPE_COLUMNS if row.get(name) is not None}
    return {name: str(value) for name, value in {
        "sweep": sweep, "family": row["family"], "variant": row.get("variant"),
        "trial_id": spec["trial_id"], "key": spec["key"], "seed": spec["seed"],
        "tuned": spec["tuned_json"], **shape}.items() if value is not None}


def curve_step(result: Mapping[str, object]) -> dict[str, object]:
    """The result a tracker logs: stepped by tokens, without the trial's config (the tracker
    keeps that as params); a final summary without curve fields."""


    step = result.get("tokens") or result[TRAINING_ITERATION]
    drop = {"config", *CURVE_FIELDS} if result.get(FINAL_FLAG) else {"config"}
    return {**{k: v for k, v in result.items() if k not in drop}, TIMESTEPS_TOTAL: step}


def _mlflow(sweep: str, folder: str, ended: Ended) -> Callback:
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    class MLflowTrials(MLflowLoggerCallback):
        def log_trial_start(self, trial):
            common = self.tags
            self.tags = {**common, **trial_tags(sweep, trial)}  # start_run takes self.tags
            try:
                super().log_trial_start(trial)
            finally:
                self.tags = common

        def log_trial_result(self, iteration, trial, result):
            super().log_trial_result(iteration, trial, curve_step(result))

        def log_trial_end(self, trial, failed=False):
            from mlflow import MlflowClient

            MlflowClient().set_tag(ray_compat.mlflow_run_id(self, trial), STATUS_TAG,
                                   trial_status(ended, trial, failed))
            super().log_trial_end(trial, failed)

    return MLflowTrials(experiment_name=sweep, tags={"sweep": sweep})


def _check_mlflow() -> None:
    """Open the tracking store MLFLOW_TRACKING_URI names (MLflow's default without it), as
    the callback will: MLflow 3 refuses its file store unless MLFLOW_ALLOW_FILE_STORE is set,
    an unknown scheme has no store, a server must answer (once, within 10 s)."""
    import mlflow
    from mlflow import MlflowClient

    uri = mlflow.get_tracking_uri()
    with environment(MLFLOW_CHECK_ENV):
        try:
            MlflowClient(uri).search_experiments(max_results=1)
        except Exception as error:  # noqa: BLE001 - MLflow raises many kinds; each is this one line
            text = str(error).strip()
            problem = (text.splitlines()[0] if text else type(error).__name__)[:200]
            if "MLFLOW_ALLOW_FILE_STORE" in text:
                problem = ("MLflow 3 no longer writes its file store: use a database "
                           "(sqlite:///mlflow.db) or a server (http://HOST:5000), or set "
                           "MLFLOW_ALLOW_FILE_STORE=true")
            raise UserError(f"MLflow cannot log to {uri!r}: {problem}",
                            key="MLFLOW_TRACKING_URI") from None


def _wandb(sweep: str, folder: str, ended: Ended) -> Callback:
    from ray.air.integrations.wandb import WandbLoggerCallback

    @ray_compat.wandb_files_written  # each run's file complete before Ray ends its actor
    class WandbTrials(WandbLoggerCallback):
        def log_trial_start(self, trial):
            common = dict(self.kwargs)
            tags = trial_tags(sweep, trial)
            self.kwargs["tags"] = [f"{k}={v}"[:64] for k, v in tags.items()]  # wandb.init
            self.kwargs["config"] = tags
            try:
                super().log_trial_start(trial)
            finally:
                self.kwargs = common

        def log_trial_result(self, iteration, trial, result):
            super().log_trial_result(iteration, trial, curve_step(result))

        def log_trial_end(self, trial, failed=False):
            if ray_compat.wandb_logging(self, trial):  # a config value: no tags after init
                super().log_trial_result(0, trial, {
                    "config": {STATUS_TAG: trial_status(ended, trial, failed)}})
            super().log_trial_end(trial, failed)

        def __del__(self):  # Ray's own fails when run at exit, after `ray` is torn down
            if not sys.is_finalizing():
                super().__del__()

    # Given to wandb.init in its logging actor, which may not share the driver's environment.
    settings: WandbSettings = {"dir": os.environ.get("WANDB_DIR", folder)}
    if os.environ.get("WANDB_MODE"):
        settings["mode"] = os.environ["WANDB_MODE"]
    return WandbTrials(project=os.environ.get("WANDB_PROJECT", "shapesweep"), group=sweep,
                       **settings)


class WandbSettings(TypedDict, total=False):
    """What `wandb.init` is given besides the project and group (WANDB_DIR, WANDB_MODE)."""

    dir: str
    mode: str


def _tensorboard(sweep: str, folder: str, ended: Ended) -> Callback:
    from ray.tune.logger import TBXLoggerCallback

    class TensorBoardTrials(TBXLoggerCallback):
        def log_trial_result(self, iteration, trial, result):
            super().log_trial_result(iteration, trial, curve_step(result))

        def log_trial_end(self, trial, failed=False):
            writer = ray_compat.tensorboard_writer(self, trial)
            if writer is None:  # it ended before its first evaluation
                self.log_trial_start(trial)
                writer = ray_compat.tensorboard_writer(self, trial)
            writer.add_text(STATUS_TAG, trial_status(ended, trial, failed))
            super().log_trial_end(trial, failed)

    return TensorBoardTrials()


TRACKERS = {
    "mlflow": Tracker("mlflow", "mlflow", _mlflow, _check_mlflow),
    "wandb": Tracker("wandb", "wandb", _wandb),
    "tensorboard": Tracker("tensorboardX", "tensorboard", _tensorboard),
}


def check_trackers(names: list[str]) -> None:
    """Refuse an unknown target, one whose package is missing, or its settings, before any work."""
    for name in names:
        tracker = TRACKERS.get(name)
        if tracker is None:
            raise UserError(f"unknown tracker {name!r} ({', '.join(TRACKERS)})", key="--log-to")
        if importlib.util.find_spec(tracker.module) is None:
            raise UserError(f"{name} needs the {tracker.extra} extra: "
                            f"pip install 'shapesweep[{tracker.extra}]'", key="--log-to")
    for name in dict.fromkeys(names):
        TRACKERS[name].check()


def tracker_callbacks(names: list[str], sweep: str, folder: str, ended: Ended) -> list[Callback]:
    """One Tune logger callback per `--log-to` target (each named once); `ended` tells how a
    trial that did not fail ended (the driver's rule, passed in: trackers never import it)."""
    return [TRACKERS[name].make(sweep, folder, ended) for name in dict.fromkeys(names)]
