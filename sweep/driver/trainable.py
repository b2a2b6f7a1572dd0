"""The Ray Tune function trainable: one trial = one candidate document trained by the loop.

The loop knows nothing of Ray; this adapter turns its evaluation callback into
`tune.report`, so ASHA sees `val_loss` over `tokens`. When the scheduler stops a
trial, Ray makes `tune.report` raise `SystemExit` in this thread; we turn that into
the loop's own `StopTrial` so it winds down through its documented path, then raise
`SystemExit` again so the thread ends as Ray expects of a stopped trial: a function that
returns makes Ray's wrapper report once more, a report no one answers, and an actor whose
thread never ends cannot be reset for the next trial (the sweep then stalls). An
evaluation goes with a checkpoint (`shapesweep.trainers.checkpoint`) once the sweep's
checkpoint interval has passed, so a trial whose worker dies continues from its last
checkpoint (`shapesweep.sweep.driver.checkpoints`), and its evaluations since are made again.

Imports of torch's modules stay inside the functions: the sweep's driver imports this module
and never imports torch, and a worker imports it per actor (a light module keeps the
per-trial overhead small).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar

from shapesweep.common import UserError, pid_alive
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.sweep.driver.checkpoints import latest, say_fallback
from shapesweep.sweep.driver.ray_compat import without_placement_group_cleaner
from shapesweep.sweep.driver.trial_config import TrialConfig
from shapesweep.trainers.spec import TrainerOptions, TrialSpec

if TYPE_CHECKING:  # torch's: imported where a trial trains, never by the sweep's driver
    from pydantic import BaseModel
    from ray.train import Checkpoint, RunConfig
    from ray.train.torch import TorchTrainer

    from shapesweep.sweep.search.trials import (
        TrialSpec as SweepTrialSpec,  # (search imports this module)
    )
    from shapesweep.trainers.fitting import Fitted
    from shapesweep.trainers.loop import TrainResult

TRIAL_FOLDER_PREFIX = "shapesweep-trial-"  # then the host, the owning process's id, Python's suffix
FINAL_FLAG = "final"  # set on the one report made after the loop returns
LAYERS_FIELD = "layers_json"  # the final report's analysis rows, as JSON text (loggers skip text)
START_FIELD = "start_step"  # on every report: the step this attempt of the trial started from
THREADS_FIELD = "threads"  # on every report: the torch threads the trial trains on
WORKERS_FIELD = "workers"  # on a data-parallel trial's reports: its Ray Train workers
PARALLEL_FIELD = "parallel"  # ... and how they share the model (ddp or fsdp)
RESULT_FIELD = "result_json"  # `train_on_workers`: rank 0's TrainResult, as JSON text

Metrics = Mapping[str, object]  # one evaluation's report (`shapesweep.trainers.spec.Reporter`)


class WorkerConfig(TypedDict):
    """What each Ray Train worker of a data-parallel trial is given (`_worker`)."""

    config: TrialConfig
    trial: TrialSpec
    checkpoints: str | None
    experiment: str
    threads: int


class TrainWorkerConfig(TypedDict):
    """What each Ray Train worker of `train_on_workers` is given (`_train_worker`)."""

    trial: TrialSpec
    threads: int


LoopConfig = TypeVar("LoopConfig", WorkerConfig, TrainWorkerConfig)


def trial_result_fields(result: TrainResult) -> dict[str, object]:
    """The scalar fields of a `TrainResult` worth reporting (the curve travels separately),
    and its analysis rows as one JSON text when it has any."""
    fields = result.to_dict()
    fields.pop("curve", None)
    layers = fields.pop("layers", None)
    scalars: dict[str, object] = {name: value for name, value in fields.items()
               if value is None or isinstance(value, bool | int | float | str)}
    return {**scalars, LAYERS_FIELD: json.dumps(layers)} if layers else scalars


DEFAULT_TRAINER = TrainerOptions()  # one process per trial, no rungs, no checkpoint interval


def run_trial(config: TrialConfig, checkpoints: str | None = None, workers: int = 1,
              resources: dict[str, float] | None = None, state_api: bool = True,
              trainer: TrainerOptions = DEFAULT_TRAINER) -> None:
    """Train `config['spec']['document']` (a candidate document) and report every evaluation,
    with the checkpoint it saved, if any. `checkpoints`: the sweep's Ray folder, where a
    trial that `resume` runs again finds what an earlier, killed run left. `workers` > 1:
    data parallel on that many Ray Train workers, each with `resources` ({cpu, gpu}), and
    `state_api` False where Ray serves no State API (`ray_compat.without_placement_group_cleaner`).
    `trainer`: the sweep's trainer options (ASHA's rungs, ddp or fsdp, the checkpoint
    interval). The trial's `TrialSpec` is built here once and trained by
    `shapesweep.trainers.fitting.train`, in this process or on each worker. Torch trains on
    as many threads as the trial (or each worker) holds CPUs, at least one
    (`shapesweep.trainers.threads`)."""
    spec = config["spec"]
    trial = trainer.trial(*_configs(spec), data=spec.get("data"), device=spec.get("device"),
                          memory_share=(resources or {}).get("gpu"))
    if workers > 1:
        return _run_data_parallel(config, trial, checkpoints, workers, resources or {}, state_api)

    from ray import tune

    from shapesweep.trainers import fitting
    from shapesweep.trainers.loop import StopTrial
    from shapesweep.trainers.threads import use_threads

    use_threads(cpu_threads(resources))
    with trial_folder() as folder:
        replay = _restore(folder, spec["trial_id"], checkpoints,
                          tune.get_context().get_experiment_name(), tune.get_checkpoint())
        tags = _tags(spec, folder)

        def report(metrics: Metrics, replayed: bool = False) -> None:
            saved = not replayed and _saved_at(folder, metrics["step"])
            try:
                tune.report({**metrics, **tags},
                            checkpoint=tune.Checkpoint.from_directory(folder) if saved else None)
            except SystemExit as stop:  # the scheduler stopped this trial
                raise StopTrial("stopped by the scheduler") from stop

        try:
            for metrics in replay:
                report(metrics, replayed=True)
        except StopTrial:
            raise SystemExit(0) from None  # stopped: end the thread, see the module docstring
        result, fitted = fitting.train(replace(trial, checkpoint_dir=folder), report,
                                       on_retry=_retried(tags))
        if result.stopped:
            raise SystemExit(0)
        tune.report({**trial_result_fields(result), **tags, **fitted.fields(), FINAL_FLAG: True})


def _retried(tags: dict[str, object]) -> Callable[[Fitted], None]:
    """An out-of-memory retry's news, on the trial's later reports (status, the live box)."""
    def retried(fitted: Fitted) -> None:
        tags.update(oom_retries=fitted.oom_retries, micro_batch_size=fitted.micro_batch_size)

    return retried


def trial_folder() -> tempfile.TemporaryDirectory[str]:
    """A private temporary folder for a trial's checkpoints, named for this host and process,
    once the folders of this host's processes that died (a killed worker, driver or machine)
    are removed: a killed trial cannot clean up after itself, and its checkpoint copies (up
    to GBs) would pile up in the temporary folder over a long study."""
    owner = f"{TRIAL_FOLDER_PREFIX}{socket.gethostname()}-"
    remove_orphans(owner)
    return tempfile.TemporaryDirectory(prefix=f"{owner}{os.getpid()}-")


def remove_orphans(owner: str) -> list[str]:
    """Remove the temporary folders named `owner`PID-... whose process is gone; return them."""


    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{owner}*-*"):
        # PID-SUFFIX, SUFFIX tempfile's 8 characters: not a host whose name extends this one's
        named = re.fullmatch(r"(\d+)-[a-z0-9_]{8}", folder.name.removeprefix(owner))
        if named and not pid_alive(int(named[1])):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


def cpu_threads(resources: dict[str, float] | None) -> int:
    """Torch threads for a trial or worker holding `resources` ({cpu, gpu}): its whole CPUs,
    at least one (a fraction of a CPU still needs a thread)."""
    return max(1, int((resources or {}).get("cpu", 1.0)))


def _configs(spec: SweepTrialSpec) -> tuple[BaseModel, TrainConfig]:
    """(model config, TrainConfig) of the trial's candidate document."""
    document = spec["document"]
    return (make_config(document["model"] | {"family": document["family"]}),
            TrainConfig(**document["train"]))


def _saved_at(folder: str, step: object) -> bool:
    """Whether the loop saved a checkpoint into `folder` at this evaluation's `step`."""
    from shapesweep.trainers import checkpoint

    return checkpoint.saved_step(folder) == step


def _tags(spec: SweepTrialSpec, folder: str) -> dict[str, object]:
    """Fields on every report: the driver files results by trial, a multi-objective Optuna
    search reads its second objective from the same report, and START_FIELD shows where a
    restored trial picked up (`folder` holds what it continues from); THREADS_FIELD says how
    many torch threads it trains on."""
    import torch

    from shapesweep.trainers import checkpoint

    return {"trial_key": spec["key"], "seed": spec["seed"], **spec["objectives"],
            START_FIELD: checkpoint.saved_step(folder) or 0, THREADS_FIELD: torch.get_num_threads()}


def _restore(folder: str, trial_id: str, earlier: str | None, this_run: str,
             restored: Checkpoint | None = None) -> list[dict[str, object]]:
    """Put the checkpoint this trial continues from into `folder`; return the evaluations
    to report again. A retry within this run (Tune's FailureConfig) gets its checkpoint
    from Tune (`restored`), and this run's driver has every evaluation before it already; a
    trial an earlier, killed run left unfinished continues from that run's checkpoint in
    `earlier` (the sweep's Ray folder), and its evaluations so far are reported again for
    this run's driver (and ASHA) to see. A damaged checkpoint (Tune's, or one found there) is
    passed over for the newest intact one, in one log line (`checkpoints.latest`)."""
    from shapesweep.trainers import checkpoint

    passed = None
    if restored is not None:
        restored.to_directory(folder)
        problem = checkpoint.damage(folder)
        if problem is None:
            return []
        for entry in Path(folder).iterdir():  # damaged: an older intact one, or step 0
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        passed = [(Path(restored.path), problem)]
        if not earlier:
            say_fallback(trial_id, passed, "starting from step 0")
            return []
    found = latest(earlier, trial_id, passed) if earlier else None
    if found is None:
        return []
    shutil.copytree(found, folder, dirs_exist_ok=True)
    return [] if Path(found).parent.parent.name == this_run else checkpoint.saved_curve(folder)


def _run_data_parallel(config: TrialConfig, trial: TrialSpec, checkpoints: str | None,
                       workers: int, resources: dict[str, float], state_api: bool = True) -> None:
    """One trial as a Ray Train `TorchTrainer` (DDP or FSDP; gloo on CPU, nccl on GPU) whose rank 0
    reports reach Tune (`TuneReportCallback`); its checkpoints land where a one-worker
    trial's do (RAY/RUN/TRIAL_ID/checkpoint_*), so retries, `resume` and cleanup are shared."""
    from ray import train as ray_train
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback

    experiment = tune.get_context().get_experiment_name()
    assert checkpoints is not None, "a data-parallel trial's checkpoints are in the sweep's Ray folder"
    loop_config: WorkerConfig = {"config": config, "trial": trial, "checkpoints": checkpoints,
                                 "experiment": experiment, "threads": cpu_threads(resources)}
    _torch_trainer(_worker, loop_config, workers, resources, ray_train.RunConfig(
                       name=config["spec"]["trial_id"],
                       storage_path=str(Path(checkpoints) / experiment),
                       checkpoint_config=ray_train.CheckpointConfig(num_to_keep=1),
                       # ray.train's RunConfig is Train v2's at run time; mypy reads v1's
                       callbacks=[TuneReportCallback()]),  # type: ignore[list-item]
                   state_api).fit()


def _torch_trainer(worker: Callable[[LoopConfig], None], loop_config: LoopConfig, workers: int,
                   resources: dict[str, float], run_config: RunConfig,
                   state_api: bool = True) -> TorchTrainer:
    """A Ray Train `TorchTrainer` running `worker(loop_config)` on `workers` workers, each
    holding `resources` ({cpu, gpu}): nccl between GPU workers, gloo between CPU ones.
    Without a State API (`state_api` False) it runs without Ray Train's placement-group
    cleaner, which would only wait on it (`ray_compat.without_placement_group_cleaner`)."""
    from ray import train as ray_train
    from ray.train.torch import TorchConfig, TorchTrainer


    gpus = resources.get("gpu", 0.0)
    per_worker = {"CPU": resources.get("cpu", 1.0)} | ({"GPU": gpus} if gpus else {})
    trainer = TorchTrainer if state_api else without_placement_group_cleaner(TorchTrainer)
    return trainer(
        worker, train_loop_config=loop_config,
        torch_config=TorchConfig(backend="nccl" if gpus else "gloo"),
        scaling_config=ray_train.ScalingConfig(num_workers=workers, use_gpu=bool(gpus),
                                               resources_per_worker=per_worker),
        run_config=run_config)


def _worker(loop_config: WorkerConfig) -> None:
    """One Ray Train worker of a data-parallel trial: its `TrialSpec` on this rank's device,
    trained as a one-process trial is (`fitting.train`: the out-of-memory retry included)."""
    from ray import train as ray_train
    from ray.train.torch import get_device

    from shapesweep.trainers import fitting
    from shapesweep.trainers.threads import use_threads

    use_threads(loop_config["threads"])
    spec, trial = loop_config["config"]["spec"], loop_config["trial"]
    context = ray_train.get_context()
    with trial_folder() as folder:
        replay = _restore(folder, spec["trial_id"], loop_config["checkpoints"],
                          loop_config["experiment"])
        tags = _tags(spec, folder) | {WORKERS_FIELD: context.get_world_size(),
                                      PARALLEL_FIELD: trial.parallel}

        def report(metrics: Metrics, replayed: bool = False) -> None:
            # rank 0 alone writes the checkpoint (one copy); every rank reports
            saved = not replayed and _saved_at(folder, metrics["step"])
            ray_train.report({**metrics, **tags},
                             checkpoint=ray_train.Checkpoint.from_directory(folder) if saved else None,
                             checkpoint_dir_name=f"checkpoint_{metrics['step']:09d}")

        for metrics in replay:
            report(metrics, replayed=True)
        result, fitted = fitting.train(trial.on(str(get_device()), folder), report,
                                       on_retry=_retried(tags))
        ray_train.report({**trial_result_fields(result), **tags, **fitted.fields(), FINAL_FLAG: True})


def train_on_workers(trial: TrialSpec, workers: int, resources: dict[str, float]) -> TrainResult:
    """`trial` trained (`fitting.train`) on `workers` Ray Train workers of the Ray this
    process is connected to, outside any sweep (`shapesweep train --workers N`): the same
    workers as a data-parallel trial's (its paths absolute: workers run elsewhere). Returns
    rank 0's `TrainResult`; a worker's UserError is raised here as itself."""
    from ray import train as ray_train

    from shapesweep.trainers.loop import TrainResult

    folder = tempfile.mkdtemp(prefix="shapesweep-train-")  # Ray Train's own files, not ours
    try:
        loop_config: TrainWorkerConfig = {"trial": trial, "threads": cpu_threads(resources)}
        trainer = _torch_trainer(_train_worker, loop_config, workers, resources,
                                 ray_train.RunConfig(name="train", storage_path=folder))
        try:
            result = trainer.fit()
        except ray_train.TrainingFailedError as error:
            found = _user_error(error)
            if found is None:
                raise
            raise found from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert result.metrics is not None, "rank 0 reports its result (with a checkpoint)"
    return TrainResult(**json.loads(result.metrics[RESULT_FIELD]))


def _train_worker(loop_config: TrainWorkerConfig) -> None:
    """One Ray Train worker of `train_on_workers`: the trial on its rank, its result reported.
    Ray Train hands the driver only metrics that came with a checkpoint, so rank 0's come
    with one (an empty folder: the loop's own checkpoints are in --checkpoint-dir)."""
    from ray import train as ray_train
    from ray.train.torch import get_device

    from shapesweep.trainers import fitting
    from shapesweep.trainers.threads import use_threads

    use_threads(loop_config["threads"])
    trial = loop_config["trial"]
    result, _ = fitting.train(trial.on(str(get_device()), trial.checkpoint_dir))
    with tempfile.TemporaryDirectory(prefix="shapesweep-result-") as folder:
        first = ray_train.get_context().get_world_rank() == 0
        ray_train.report({RESULT_FIELD: json.dumps(result.to_dict())},
                         checkpoint=ray_train.Checkpoint.from_directory(folder) if first else None)


def _user_error(error: Exception) -> Exception | None:
    """The UserError a worker raised (bad input found where the data is read), if that is
    why Ray Train failed: the CLI then says it in one line."""
    for failure in getattr(error, "worker_failures", {}).values():
        while failure is not None:
            if isinstance(failure, UserError):
                return failure
            failure = getattr(failure, "cause", None) or failure.__cause__
    return None
