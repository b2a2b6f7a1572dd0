"""The `tune.Tuner` a sweep runs: the trainable with its resources and trainer options, the
scheduler and searcher, where Tune keeps its files, the callbacks it calls (results writer,
progress, checkpoint cleaner, Tune's loggers, trackers) and how it treats a failed trial."""

from __future__ import annotations

import json
import os
import time

from ray import tune
from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.search import Searcher

from shapesweep.results.interface import ResultsStore
from shapesweep.sweep.driver.checkpoints import CheckpointCleaner
from shapesweep.sweep.driver.ray_session import ray_storage
from shapesweep.sweep.driver.results_writer import ended_as
from shapesweep.sweep.driver.sweep_check import Checked
from shapesweep.sweep.driver.sweep_files import DECISIONS_FILE
from shapesweep.sweep.driver.trackers import tracker_callbacks
from shapesweep.sweep.driver.trainable import run_trial
from shapesweep.sweep.options.sweep_options import SweepOptions
from shapesweep.sweep.search.paired_asha import PairedASHA
from shapesweep.sweep.search.strategies import TrialPlan
from shapesweep.trainers.spec import TrainerOptions


def record_decisions(scheduler: PairedASHA, store: ResultsStore, name: str) -> None:
    """Keep the noise-aware ASHA's decisions beside the results, an earlier run's first."""
    saved = store.read_json(name, DECISIONS_FILE, list)
    scheduler.decisions = saved if isinstance(saved, list) else []
    scheduler.on_decision = lambda decisions: store.write_file(
        name, DECISIONS_FILE, json.dumps(decisions, indent=1))


def tuner(options: SweepOptions, checked: Checked, plan: TrialPlan, run_config: tune.RunConfig,
          state_api: bool = True) -> tune.Tuner:
    resources = {"cpu": options.cpus_per_trial, "gpu": options.gpus_per_trial}
    checkpoints = str(ray_storage(options.root, checked.name).resolve())
    trainer = TrainerOptions(
        parallel=options.parallel, eval_at=tuple(checked.rungs),
        # kept checkpoints are exported as the trial's weights, so each is its final state:
        # a trial stopped by ASHA ends at an evaluation no interval can foresee
        checkpoint_every_s=0.0 if options.keep_checkpoints else options.checkpoint_every_s)
    trainable = tune.with_parameters(
        run_trial, checkpoints=checkpoints, workers=options.workers_per_trial, resources=resources,
        state_api=state_api, trainer=trainer)
    # N > 1 workers: the trial's actor only drives the Train workers, so it holds no CPU
    # (a Ray bundle must ask for something: one byte of memory)
    own: dict[str, float] = resources if options.workers_per_trial == 1 else {"cpu": 0, "memory": 1}
    return tune.Tuner(
        tune.with_resources(trainable, own),
        param_space=plan.param_space,
        tune_config=tune.TuneConfig(
            scheduler=checked.scheduler, num_samples=plan.num_samples,
            search_alg=plan.search_alg,
            # a Searcher is limited by Tune; the grid's generator limits itself
            max_concurrent_trials=options.max_concurrent if isinstance(plan.search_alg, Searcher) else None,
            # A warm worker runs trial after trial (no process start, torch imported once):
            # a stopped trial's thread ends with SystemExit (sweep/driver/trainable.py), so Ray can
            # reset its actor. A data-parallel trial is stopped inside Ray Train's fit, not
            # in `tune.report`, so its actors are reused only where no trial is stopped.
            reuse_actors=not options.fresh_workers and (
                options.workers_per_trial == 1 or options.scheduler == "fifo"),
            # Trials are named by our trial id (KEY-sSEED) in Ray's folders and in trackers.
            trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
        run_config=run_config,
    )


def run_config(options: SweepOptions, name: str, callbacks: list[Callback]) -> tune.RunConfig:
    """Where Tune keeps its files, what it calls back, and how it treats a failed trial."""
    ray_folder = str(ray_storage(options.root, name).resolve())
    return tune.RunConfig(
        name=f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
        storage_path=ray_folder, verbose=0,
        callbacks=[*callbacks, CheckpointCleaner(ray_folder, options.keep_checkpoints),
                   *_ray_loggers(),
                   *tracker_callbacks(options.log_to, name, ray_folder, ended_as)],
        # a trial whose worker died restarts from its last checkpoint (sweep/driver/trainable.py)
        failure_config=tune.FailureConfig(max_failures=options.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1))


def _trial_name(trial: Trial) -> str:
    return trial.config["spec"]["trial_id"]


def _ray_loggers() -> list[Callback]:
    """Tune's result files (result.json, progress.csv per trial): what `ResultGrid` and
    `tune.ExperimentAnalysis(ROOT/NAME/_ray/RUN)` read."""
    return [JsonLoggerCallback(), CSVLoggerCallback()]
