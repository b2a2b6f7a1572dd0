"""The Ray Tune driver: one sweep = one `Tuner.fit` over the trials still missing.

Rows are written by the driver (`ResultsWriter`, a Tune callback), once per trial, when
it ends: `completed` (it reached its token budget), `stopped_early` (ASHA stopped it) or
`failed` (it raised; the error text is kept and the sweep goes on). Trial ids are
`KEY-sSEED` (`KEY-tHASH-sSEED` with `tune:`), so a rerun replaces a row instead of adding
one, and a driver killed mid-sweep loses only the trials that had not ended: `resume` runs
exactly those (candidate, tuned values, seed).

Everything that can refuse a sweep (space, plan, options, seeds, data) is checked before
the catalog is opened or a folder made, so a refused run leaves nothing behind. Then the
driver takes the sweep's lease (`shapesweep.sweep.lease`): a second driver of the same sweep is refused.

Why one module of this length: it is the driver's lifecycle, start to finish (check,
lease, Ray up, Tuner.fit, rows written, Ray down), each step a function; the parts
with a job of their own already live beside it (`scheduling`, `strategies`, `search`,
`ray_compat`, `lease`, `progress`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import TypeAdapter
from ray.tune import Callback

from shapesweep.common import UserError, printable, resume_command
from shapesweep.families import base as families
from shapesweep.results import live
from shapesweep.results.rows import CURVE_FIELDS, TrialRecord, final_metrics
from shapesweep.results.store import STALE_S
from shapesweep.search_spaces.cadence import (
    cooldown_line,
    evaluation_line,
    sweep_budgets,
    token_budget,
)
from shapesweep.sweep import ray_compat
from shapesweep.sweep.options import saved_values
from shapesweep.sweep.ray_session import (
    SESSION_RECORD,
    check_address,
    clear_dead_session,
    init_ray,
    quiet,
    ray_storage,
    stop_ray,
    terminate_as_interrupt,
)
from shapesweep.sweep.scheduling import Choice, choose
from shapesweep.sweep.sweep_options import SweepOptions
from shapesweep.trainers.spec import TrainerOptions

OPTIONS_FILE = "sweep.json"  # how the sweep was run, so `resume NAME` can run it again
SPACE_FILE = "space.yaml"


@dataclass
class SweepOutcome:
    name: str
    status: str
    counts: dict[str, int]
    launched: int


def code_version() -> str:
    """`git describe` of the checkout this package runs from, else the package version."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"],
                             cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shapesweep")
    except PackageNotFoundError:
        return "unknown"


def data_hash_for(space: Any, candidates: list | None, data: str | None) -> tuple[str, list[str]]:
    """Load (and so validate) the data once in the driver, before any trial, and check the
    models can read it; returns its hash (it goes on every row) and notices to print.

    Data no candidate can read (token ids past every vocab_size, splits shorter than
    seq_len + 1) refuses the sweep; data only some candidates cannot read is a notice, and
    their trials fail with the reason (the sweep goes on, `--retry-failed` reruns them).
    """
    if space.families and not any(families.get(f).task.reads_tokens for f in space.families):  # images
        from shapesweep.trainers.vision_data import load_images

        return load_images(data).data_hash, []
    from shapesweep.trainers.data import check_fits, load_lm_data

    tokens = load_lm_data(data)
    vocab = _vocab_sizes(space, candidates)
    check_fits(tokens, max(vocab), min(v.train.seq_len for v in space.resolved()))
    short = sorted(v for v in vocab if v < tokens.vocab_size)
    notices = [f"{tokens.source}: vocab_size: the data uses {tokens.vocab_size} token ids; "
               f"candidates with vocab_size {', '.join(map(str, short))} cannot read it "
               "and will fail"] if short else []
    return tokens.data_hash, notices


def _vocab_sizes(space: Any, candidates: list | None) -> set[int]:
    """Every vocab_size the sweep may train: the grid's candidates', else each language-model
    variant's (its family's default where the variant sets none)."""
    if candidates is not None:
        return {c.config.vocab_size for c in candidates if families.of(c.config).task.reads_tokens}
    return {v for variant in space.resolved() if families.get(variant.family).task.reads_tokens
            for v in variant.grid_values().get("vocab_size")
            or [variant.fixed.get("vocab_size", _default(variant.family, "vocab_size"))]}


def _default(family: str, name: str) -> Any:
    return families.get(family).config.model_fields[name].default


def load_options(root: str, name: str, model: type = SweepOptions) -> SweepOptions:
    """The options a sweep was started with (for `resume`), its space resolved under `root`:
    a copied or moved root resumes with its own copy of the space."""
    from pydantic import ValidationError

    from shapesweep.results.store import (
        list_sweeps,
        read_sweep_file,
        sweep_dir,
        sweep_file_repair,
        unknown_sweep,
    )

    path = f"{sweep_dir(root, name)}/{OPTIONS_FILE}"
    try:
        text = read_sweep_file(root, name, OPTIONS_FILE)
        if text is None and name in list_sweeps(root):
            raise UserError("the sweep has results but no options file to resume it with: "
                            "`run` its space again under the same --name", file=path)
        if text is None:
            raise unknown_sweep(name, root)
        options = TypeAdapter(model).validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise UserError(f"not a sweep options file ({first['msg']}); "
                        f"{sweep_file_repair(root, name, OPTIONS_FILE)}", file=path,
                        key=where or None) from None
    except (OSError, ValueError) as error:  # unreadable
        raise UserError(f"cannot read: {error}", file=path) from None
    # The space is the copy kept in the sweep folder, named relative to it (sweeps from
    # before this stored an absolute path: only its file name counts).
    options.space = f"{sweep_dir(root, name)}/{PurePosixPath(options.space).name}"
    options.root = root  # not saved (a moved root resumes); older files named it absolutely
    return options


def _error_text(trial: Any) -> str:
    """The failed trial's exception as `Type: message` (the traceback's last line)."""
    text = ""
    for folder in (getattr(trial, "local_path", None), getattr(trial, "path", None)):
        if folder and (Path(folder) / "error.txt").is_file():
            text = (Path(folder) / "error.txt").read_text()
            break
    if not text:
        try:
            text = trial.get_error() or ""
        except Exception:  # noqa: BLE001 - no error text is not worth failing the sweep for
            text = ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error (see Ray's logs)"
    # "shapesweep.common.UserError: ..." -> "UserError: ..." (the type says enough)
    return re.sub(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*: )", "", lines[-1])


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl-C until the block ends, then raise it: a trial's row, curve and catalog
    counts are filed together or not at all. Only the main thread may set handlers."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is None):  # a handler Python cannot restore
        yield
        return
    caught: list[tuple] = []
    previous = signal.signal(signal.SIGINT, lambda *args: caught.append(args))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(*caught[0])
            elif previous != signal.SIG_IGN:
                raise KeyboardInterrupt


class ResultsWriter(Callback):
    """Writes each trial's row and curve to the results store exactly once, when it ends,
    and compacts the sweep every `compact_every` rows, so a reader of a long sweep (`status`,
    `serve`) opens a few files, not one per trial landed."""

    compact_every = 256

    def __init__(self, root: str, sweep: str, data_hash: str, progress: Any = None):
        self.progress = progress
        self.root, self.sweep, self.data_hash = root, sweep, data_hash
        self.code_version = code_version()
        self.curves: dict[str, list[dict]] = {}
        self.written: set[str] = set()

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks for experiment restore, which we never use (resume
        # reads the results store); the live display stays behind.
        return {k: v for k, v in self.__dict__.items() if k != "progress"}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        from shapesweep.sweep.trainable import FINAL_FLAG

        if not result.get(FINAL_FLAG):
            point = {name: result.get(name) for name in CURVE_FIELDS}
            live.add_point(self.curves.setdefault(trial.trial_id, []), point)
            spec = trial.config["spec"]  # the live curve `status` and `serve` show meanwhile
            live.append_point(self.root, self.sweep, spec, point,
                              token_budget(spec["document"]["train"], spec["row"]["family"]))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._write(trial, ended_as(trial), None)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._write(trial, "failed", _error_text(trial))

    def _write(self, trial: Any, status: str, error: str | None) -> None:
        with sigint_deferred():
            self._file(trial, status, error)

    def _file(self, trial: Any, status: str, error: str | None) -> None:
        from shapesweep.sweep.trainable import LAYERS_FIELD

        spec = trial.config["spec"]
        if spec["trial_id"] in self.written:
            return
        last = trial.last_result or {}
        curve = self.curves.pop(trial.trial_id, [])
        record = TrialRecord(
            sweep=self.sweep, trial_id=spec["trial_id"], key=spec["key"], seed=spec["seed"],
            status=status, candidate=spec["row"], document=spec["document"],
            budget_tokens=token_budget(spec["document"]["train"], spec["row"]["family"]),
            metrics=final_metrics(last, curve, status), curve=curve,
            layers=json.loads(last.get(LAYERS_FIELD) or "[]"), tuned_json=spec["tuned_json"],
            error=error, code_version=self.code_version,
            data_hash=last.get("data_hash") or self.data_hash, finished_at=datetime.now(UTC))
        record.write(self.root)
        live.remove(self.root, self.sweep, spec["trial_id"])
        self.written.add(spec["trial_id"])
        if len(self.written) % self.compact_every == 0:
            # Under the lease this driver is the only writer and compactor, and it writes
            # nothing meanwhile; running trials' live curves are fresh, so they stay.
            _compact(self.root, self.sweep, stale_s=STALE_S)
        if self.progress is not None:
            self.progress.finished(trial.trial_id, status, spec["trial_id"], error,
                                   record.trial_row())


def ended_as(trial: Any) -> str:
    """A trial that ended without error: `completed` (it reached its token budget) or
    `stopped_early` (the scheduler stopped it)."""
    from shapesweep.sweep.search import reached_budget

    spec = trial.config["spec"]
    budget = token_budget(spec["document"]["train"], spec["row"]["family"])
    return "completed" if reached_budget(trial.last_result or {}, budget) else "stopped_early"


def count_statuses(statuses: dict) -> dict[str, int]:
    counts = {"completed": 0, "stopped_early": 0, "failed": 0}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    return counts


def _scheduler(options: SweepOptions, space: Any, candidates: list | None,
               seeds: list[int]) -> tuple[Any, Choice]:
    """Tune's scheduler for the sweep, and the choice it comes from (`scheduling.choose`:
    which, why, and the token counts of ASHA's rungs, where trials evaluate)."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from shapesweep.sweep.paired_asha import PairedASHA

    choice = choose(options.scheduler, space, candidates, seeds, options.grace_tokens,
                    options.reduction_factor, options.workers_per_trial, options.max_concurrent)
    if choice.kind == "fifo":
        return FIFOScheduler(), choice
    if choice.per_trial:
        return ASHAScheduler(time_attr="tokens", metric="val_loss", mode="min", max_t=choice.budget,
                             grace_period=choice.rungs[0],
                             reduction_factor=options.reduction_factor), choice
    return PairedASHA(choice.rungs, options.reduction_factor), choice


@dataclass
class _Checked:
    """What the up-front checks established; nothing is on disk yet."""

    space: Any
    strategy: Any  # a shapesweep.sweep.strategies.SearchStrategy
    storage_url: str
    seeds: list[int]
    scheduler: Any
    rungs: list[float]  # ASHA's, where trials evaluate besides their cadence
    notices: list[str]
    data_hash: str
    budget: int | None  # the trials' one token budget; None when recipes differ (no ASHA)


def run_sweep(options: SweepOptions, console: Any = None) -> SweepOutcome:
    """Run (or finish) a sweep; see the module docstring for what lands where."""
    from shapesweep.results.catalog import Catalog
    from shapesweep.results.store import completed_keys
    from shapesweep.sweep.lease import sweep_lease

    options, checked = _check(options)
    catalog = Catalog(checked.storage_url)
    with sweep_lease(catalog, options.name), quiet():
        clear_dead_session(options.root, options.name)  # what a killed driver left of Ray
        _compact(options.root, options.name)  # ... and in fragments
        plan = _plan(options, checked, catalog)
        if plan.launches:
            status, launched = _fit(options, checked, plan, catalog, console)  # compacts
        else:
            status, launched = "finished", 0
            catalog.set_status(options.name, status)
            _compact(options.root, options.name)
    counts = count_statuses(completed_keys(options.root, options.name))
    return SweepOutcome(options.name, status, counts, launched)


def _check(options: SweepOptions) -> tuple[SweepOptions, _Checked]:
    """Everything that can refuse the sweep, before anything is written anywhere; returns
    the options as the sweep runs them (its name, the strategy's settings)."""
    from shapesweep.results.catalog import default_catalog_url
    from shapesweep.results.store import validate_sweep_name
    from shapesweep.search_spaces.space import check_seeds_option, check_sweep_trials, load_space
    from shapesweep.sweep.packing import check_memory
    from shapesweep.sweep.strategies import strategy_for
    from shapesweep.sweep.trackers import check_trackers

    check_trackers(options.log_to)
    space = load_space(options.space)  # an unreadable file is one line (safe_yaml)
    name = validate_sweep_name(options.name or space.name)
    seeds = check_seeds_option(options.seeds or space.fixed_seeds())
    given = seeds if options.seeds else None
    check_sweep_trials(space, seeds=given)  # before the solver, one candidate per variant
    strategy = strategy_for(options, space)
    if strategy.candidates is not None:
        check_sweep_trials(space, len(strategy.candidates), given)
    _check_data_parallel(options, space, strategy.candidates)
    check_memory(options, space, strategy.candidates)  # trials that fit (issues 37, 39)
    budgets = sweep_budgets(space, strategy.candidates)
    scheduler, choice = _scheduler(options, space, strategy.candidates, seeds)
    lines = [choice.line, evaluation_line(space, strategy.candidates, choice.rungs),
             cooldown_line(space, strategy.candidates, choice.rungs)]
    data_hash, data_notices = data_hash_for(space, strategy.candidates, _abs(options.data))
    storage_url = options.storage or default_catalog_url(options.root)  # makes a local root
    budget = next(iter(budgets)) if budgets and len(budgets) == 1 else None
    options = replace(options, name=name, scheduler=choice.kind, **strategy.settings())
    check_address(options.address)  # last: what the space and flags can refuse comes first
    return options, _Checked(space, strategy, storage_url, seeds, scheduler, choice.rungs,
                             [*strategy.notices, *filter(None, lines), *data_notices],
                             data_hash, budget)


def _check_data_parallel(options: SweepOptions, space: Any, candidates: list | None) -> None:
    """With N > 1 workers per trial: every language model's step splits evenly over them,
    and under fsdp no candidate is a mixture of experts (an Optuna search's candidates are
    not known yet; its trials are checked as they start) and no recipe compiles."""
    from shapesweep.trainers.parallel import (
        check_compilable,
        check_shardable,
        check_split,
        sequences_per_step,
    )

    if options.workers_per_trial < 2:
        return
    if options.parallel == "fsdp":
        for variant in space.resolved():
            check_compilable(variant.train, "--parallel")
    for candidate in candidates or []:
        if families.get(candidate.config.family).task.reads_tokens:
            train = space.train_for(candidate=candidate)
            check_split(sequences_per_step(train), options.workers_per_trial)
        if options.parallel == "fsdp":
            check_shardable(candidate.config)


def _compact(root: str, name: str, stale_s: float = 0.0) -> None:
    """Merge the sweep's result fragments; a failure is a warning, never a failed sweep.
    The lease makes this driver the sweep's only writer, and so its only compactor."""
    from shapesweep.results.store import compact

    try:
        compact(root, name, stale_s=stale_s)  # 0: no other writer while the lease is held
    except Exception as error:  # noqa: BLE001 - the results are intact either way
        print(printable(f"warning: could not compact the results of sweep {name!r}: {error}",
                        one_line=True), file=sys.stderr, flush=True)


def _plan(options: SweepOptions, checked: _Checked, catalog: Any) -> Any:
    """With the lease held: what the strategy runs now (the trials the store lacks), the
    sweep registered, and how it runs saved beside its results for `resume`."""
    from shapesweep.results.catalog import without_password
    from shapesweep.results.store import completed_keys, read_sweep_file, write_sweep_file
    from shapesweep.sweep.strategies import PlanContext

    name, space = options.name, checked.space
    rerun = {"failed"} if options.retry_failed else set()
    skip = {triple for triple, status in completed_keys(options.root, name).items()
            if status not in rerun}
    plan = checked.strategy.plan(PlanContext(
        options.root, name, checked.seeds, _abs(options.data), checked.storage_url,
        checked.budget, skip))
    saved_space = read_sweep_file(options.root, name, SPACE_FILE)
    _check_saved_space(name, saved_space, space)
    catalog.register(name, space.name, space.source_text, space.space_hash, plan.total,
                     hash_now=_space_hash)
    _say(*checked.notices)
    if saved_space is None:
        write_sweep_file(options.root, name, SPACE_FILE, space.source_text)
    # Paths in the sweep folder are relative to it (`resume` resolves them under the root it
    # is given, and the root is the one it is given); the data path is absolute, so a resume
    # from another folder finds it.
    saved = saved_values(options) | {
        "space": SPACE_FILE, "data": _abs(options.data),
        "storage": without_password(options.storage)}
    write_sweep_file(options.root, name, OPTIONS_FILE, json.dumps(saved, indent=2, sort_keys=True))
    return plan


def _check_saved_space(name: str, saved_text: str | None, space: Any) -> None:
    """Refuse a sweep folder that holds another space's trials (one copied from another root,
    or a catalog that lost its row): `status` reads the choice seeds and the baseline from
    the saved space, so mixing two spaces' trials would mislabel them."""
    if saved_text is None or saved_text == space.source_text:
        return
    try:
        saved_hash = _space_hash(saved_text)
    except UserError:
        saved_hash = "unreadable"
    if saved_hash != space.space_hash:
        raise UserError(
            f"sweep {name!r} already holds trials of a different search space (its "
            f"{SPACE_FILE} has hash {saved_hash[:12]}; this one is {space.space_hash}): choose "
            f"another --name for this space, or finish the existing sweep with "
            f"`shapesweep resume {name}`", key="name")


def _space_hash(text: str) -> str:
    """The hash this version gives a space's YAML text (a saved one, read without running code)."""
    from shapesweep.search_spaces.safe_yaml import parse_yaml
    from shapesweep.search_spaces.space import parse_space

    return parse_space(parse_yaml(text, SPACE_FILE), text, SPACE_FILE).space_hash


def _fit(options: SweepOptions, checked: _Checked, plan: Any, catalog: Any,
         console: Any) -> tuple[str, int]:
    """Run the plan's trials in one `Tuner.fit`, each filed as it ends, then merge the
    sweep's results; returns how the sweep ended (also its catalog status) and how many
    trials were filed."""
    from shapesweep.sweep.progress import SweepProgress

    name = options.name
    started_ray, session_dir = init_ray(options.address, ray_storage(options.root, name) / SESSION_RECORD,
                                        then=f"to resume: {resume_command(name, options.root)}")
    status = "failed"
    try:  # from here on, an interrupt stops the Ray just started
        grid = plan.param_space.get("spec")  # a grid's trials are known now: `tune.grid_search(specs)`
        progress = SweepProgress(total=plan.launches, console=console, enabled=options.progress,
                                 budget=checked.budget,
                                 planned=grid.get("grid_search") if isinstance(grid, dict) else None)
        writer = ResultsWriter(options.root, name, checked.data_hash, progress)
        if hasattr(checked.scheduler, "expect"):  # the noise-aware ASHA: each candidate's seeds
            _record_decisions(checked.scheduler, options.root, name)
            checked.scheduler.expect(plan.specs)
        tuner = _tuner(options, checked, plan, _run_config(options, [writer, progress]),
                       state_api=session_dir is None)  # our local Ray runs no dashboard
        catalog.set_status(name, "running")
        with progress, terminate_as_interrupt(), ray_compat.no_callback_census():
            tuner.fit()
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        catalog.set_status(name, status)
        # The results are merged while Ray stops: neither waits for the other.
        merging = threading.Thread(target=_compact, args=(options.root, name),
                                   name="shapesweep-compact")
        merging.start()
        try:
            if started_ray:
                stop_ray(session_dir, ray_storage(options.root, name) / SESSION_RECORD)
        finally:
            with sigint_deferred():  # the lease is released only after the merge
                merging.join()
    return status, len(writer.written)


def _record_decisions(scheduler: Any, root: str, name: str) -> None:
    """Keep the noise-aware ASHA's decisions beside the results, an earlier run's first."""
    from shapesweep.results.store import read_sweep_json, write_sweep_file
    from shapesweep.sweep.paired_asha import DECISIONS_FILE

    scheduler.decisions = read_sweep_json(root, name, DECISIONS_FILE, list) or []
    scheduler.on_decision = lambda decisions: write_sweep_file(
        root, name, DECISIONS_FILE, json.dumps(decisions, indent=1))


def _tuner(options: SweepOptions, checked: _Checked, plan: Any, run_config: Any,
           state_api: bool = True):
    from ray import tune
    from ray.tune.search import Searcher

    from shapesweep.sweep.trainable import run_trial

    resources = {"cpu": options.cpus_per_trial, "gpu": options.gpus_per_trial}
    checkpoints = str(ray_storage(options.root, options.name).resolve())
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
    own = resources if options.workers_per_trial == 1 else {"cpu": 0, "memory": 1}
    return tune.Tuner(
        tune.with_resources(trainable, own),
        param_space=plan.param_space,
        tune_config=tune.TuneConfig(
            scheduler=checked.scheduler, num_samples=plan.num_samples,
            search_alg=plan.search_alg,
            # a Searcher is limited by Tune; the grid's generator limits itself
            max_concurrent_trials=options.max_concurrent if isinstance(plan.search_alg, Searcher) else None,
            # A warm worker runs trial after trial (no process start, torch imported once):
            # a stopped trial's thread ends with SystemExit (sweep/trainable.py), so Ray can
            # reset its actor. A data-parallel trial is stopped inside Ray Train's fit, not
            # in `tune.report`, so its actors are reused only where no trial is stopped.
            reuse_actors=not options.fresh_workers and (
                options.workers_per_trial == 1 or options.scheduler == "fifo"),
            # Trials are named by our trial id (KEY-sSEED) in Ray's folders and in trackers.
            trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
        run_config=run_config,
    )


def _run_config(options: SweepOptions, callbacks: list[Callback]):
    """Where Tune keeps its files, what it calls back, and how it treats a failed trial."""
    from ray import tune

    from shapesweep.sweep.checkpoints import CheckpointCleaner
    from shapesweep.sweep.trackers import tracker_callbacks

    ray_folder = str(ray_storage(options.root, options.name).resolve())
    return tune.RunConfig(
        name=f"{options.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
        storage_path=ray_folder, verbose=0,
        callbacks=[*callbacks, CheckpointCleaner(ray_folder, options.keep_checkpoints),
                   *_ray_loggers(),
                   *tracker_callbacks(options.log_to, options.name, ray_folder, ended_as)],
        # a trial whose worker died restarts from its last checkpoint (sweep/trainable.py)
        failure_config=tune.FailureConfig(max_failures=options.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1))


def _trial_name(trial: Any) -> str:
    return trial.config["spec"]["trial_id"]


def _ray_loggers() -> list[Callback]:
    """Tune's result files (result.json, progress.csv per trial): what `ResultGrid` and
    `tune.ExperimentAnalysis(ROOT/NAME/_ray/RUN)` read."""
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    return [JsonLoggerCallback(), CSVLoggerCallback()]


def _say(*lines: str) -> None:
    """Notices before the sweep starts (the plan, dropped grid points), on stderr."""
    for line in lines:
        print(printable(line), file=sys.stderr, flush=True)  # they name variants of the space


def _abs(path: str | None) -> str | None:
    return str(Path(path).resolve()) if path else None
