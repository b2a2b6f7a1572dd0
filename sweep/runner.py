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
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import TypeAdapter
from ray.tune import Callback

from shapesweep.common import UserError

OPTIONS_FILE = "sweep.json"  # how the sweep was run, so `resume NAME` can run it again
SPACE_FILE = "space.yaml"
CURVE_FIELDS = ("step", "tokens", "train_loss", "val_loss", "lr", "elapsed_s", "psnr", "ssim")
QUIET_ENV = {
    # Tune's loggers are chosen by `_ray_loggers` (json + csv, so ResultGrid and
    # ExperimentAnalysis read the sweep; TensorBoard files only with --log-to tensorboard).
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
    "TUNE_DISABLE_SIGINT_HANDLER": "1",  # Ctrl-C reaches us: we mark the sweep interrupted
    "RAY_DEDUP_LOGS": "0",
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "1000",
}


@dataclass
class SweepOptions:
    """Everything `shapesweep run` takes; saved beside the results for `resume`."""

    space: str
    name: str | None = None
    root: str = "./sweeps"
    address: str | None = None
    gpus_per_trial: float = 0.0
    cpus_per_trial: float = 1.0
    max_concurrent: int | None = None
    search: str = "grid"
    num_samples: int = 8
    seeds: list[int] | None = None
    scheduler: str = "asha"
    grace_tokens: int | None = None
    reduction_factor: float = 3.0
    storage: str | None = None
    data: str | None = None
    multi_objective: str | None = None
    retry_failed: bool = False
    sampler_seed: int | None = 0
    log_to: list[str] = field(default_factory=list)  # experiment trackers (shapesweep.sweep.trackers)
    progress: bool = True
    max_failures: int = 2  # retries of a trial whose worker died, from its last checkpoint
    keep_checkpoints: bool = False  # keep ended trials' last checkpoints (export --weights)
    workers_per_trial: int = 1  # > 1: data parallel on Ray Train, resources per worker
    extra: dict[str, Any] = field(default_factory=dict)


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
    if space.families and all(f == "vision_mlp" for f in space.families):
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
    """Every vocab_size the sweep may train: the grid's candidates', else each variant's."""
    if candidates is not None:
        return {c.config.vocab_size for c in candidates if hasattr(c.config, "vocab_size")}
    from shapesweep.search_spaces.configs import ConventionalConfig

    default = ConventionalConfig.model_fields["vocab_size"].default
    return {v for variant in space.resolved()
            for v in variant.grid_values().get("vocab_size")
            or [variant.fixed.get("vocab_size", default)]}


def token_budget(train: Any, family: str) -> int:
    """What a trial that runs to the end has trained on (images for vision), under its
    resolved recipe `train` (a TrainConfig or its JSON)."""
    from shapesweep.search_spaces.configs import TrainConfig

    train = TrainConfig.model_validate(train)
    if train.steps:
        per_step = train.batch_size if family == "vision_mlp" else train.batch_tokens
        return int(train.steps * per_step)
    return int(train.tokens)


def sweep_budgets(space: Any, candidates: list | None) -> set[int] | None:
    """The token budgets the sweep's trials train: one per grid candidate's recipe; for an
    Optuna search each variant's, or None when tokens_per_param makes it per candidate."""
    if candidates is not None:
        return {token_budget(space.train_for(candidate=c), c.config.family) for c in candidates}
    variants = space.resolved()
    if any(v.train.tokens_per_param is not None and v.train.steps is None for v in variants):
        return None
    return {token_budget(v.train, v.family) for v in variants}


def _ray_storage(root: str, name: str) -> Path:
    """Where Ray Tune keeps its own files (trial logs, error.txt): in the sweep's folder when
    the root is on this machine, else in the local temp folder (results never need them)."""
    from shapesweep.results.store import local_folder

    local = local_folder(root)
    return Path(local or tempfile.gettempdir()) / (name if local else f"shapesweep-{name}") / "_ray"


def _without_password(url: str | None) -> str | None:
    """A storage URL safe to keep on disk: `resume` then takes the password from the
    driver's environment (PGPASSWORD, ~/.pgpass) or from `--storage` given again."""
    if not url:
        return url
    from sqlalchemy.engine import URL, make_url

    parsed = make_url(url)
    if parsed.password is None:
        return url
    bare = URL.create(parsed.drivername, parsed.username, None, parsed.host, parsed.port,
                      parsed.database, parsed.query)  # URL.set(password=None) keeps it
    return bare.render_as_string(hide_password=False)


def load_options(root: str, name: str) -> SweepOptions:
    """The options a sweep was started with (for `resume`), its space resolved under `root`:
    a copied or moved root resumes with its own copy of the space."""
    from pydantic import ValidationError
    from shapesweep.results.store import read_sweep_file, sweep_dir

    path = f"{sweep_dir(root, name)}/{OPTIONS_FILE}"
    try:
        text = read_sweep_file(root, name, OPTIONS_FILE)
        if text is None:
            raise UserError(f"no sweep named {name!r} under {root} (nothing to resume)", file=path)
        options = TypeAdapter(SweepOptions).validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise UserError(f"not a sweep options file ({first['msg']})", file=path,
                        key=where or None) from None
    except (OSError, ValueError) as error:  # unreadable, not UTF-8
        raise UserError(f"cannot read: {error}", file=path) from None
    # The space is the copy kept in the sweep folder, named relative to it (sweeps from
    # before this stored an absolute path: only its file name counts).
    options.space = f"{sweep_dir(root, name)}/{PurePosixPath(options.space).name}"
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
    """Writes each trial's row and curve to the results store exactly once, when it ends."""

    def __init__(self, root: str, sweep: str, data_hash: str, catalog: Any,
                 statuses: dict[tuple[str, str, int], str], progress: Any = None):
        self.progress = progress
        self.root, self.sweep, self.data_hash = root, sweep, data_hash
        self.catalog, self.statuses = catalog, statuses
        self.code_version = code_version()
        self.curves: dict[str, list[dict]] = {}
        self.written: set[str] = set()

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks for experiment restore, which we never use (resume
        # reads the results store); the database handle and live display stay behind.
        return {k: v for k, v in self.__dict__.items() if k not in ("catalog", "progress")}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        from shapesweep.sweep.trainable import FINAL_FLAG

        if not result.get(FINAL_FLAG):
            self.curves.setdefault(trial.trial_id, []).append(
                {name: result.get(name) for name in CURVE_FIELDS})

    def on_trial_complete(self, iteration, trials, trial, **info):
        from shapesweep.sweep.search import reached_budget

        spec = trial.config["spec"]
        budget = token_budget(spec["document"]["train"], spec["row"]["family"])
        reached = reached_budget(trial.last_result or {}, budget)
        self._write(trial, "completed" if reached else "stopped_early", None)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._write(trial, "failed", _error_text(trial))

    def _write(self, trial: Any, status: str, error: str | None) -> None:
        with sigint_deferred():
            self._file(trial, status, error)

    def _file(self, trial: Any, status: str, error: str | None) -> None:
        from shapesweep.results.schema import TRIAL_COLUMNS
        from shapesweep.results.store import write_trial
        from shapesweep.sweep.search import trial_triple
        from shapesweep.sweep.trainable import LAYERS_FIELD

        spec = trial.config["spec"]
        if spec["trial_id"] in self.written:
            return
        curve = self.curves.pop(trial.trial_id, [])
        row = {k: v for k, v in spec["row"].items() if k in TRIAL_COLUMNS.names}
        row.update(self._metrics(trial.last_result or {}, curve, status))
        train = spec["document"]["train"]
        row.update(
            sweep=self.sweep, trial_id=spec["trial_id"], key=spec["key"], seed=spec["seed"],
            tuned_json=spec["tuned_json"], status=status, error=error,
            train_tokens_budget=token_budget(train, spec["row"]["family"]),
            seq_len=train.get("seq_len"), lr=train.get("lr"),
            config_json=json.dumps(spec["document"], sort_keys=True),
            code_version=self.code_version,
            data_hash=(trial.last_result or {}).get("data_hash") or self.data_hash,
            finished_at=datetime.now(UTC),
        )
        curve_rows = [{"sweep": self.sweep, "trial_id": spec["trial_id"], **point}
                      for point in curve if point.get("step") is not None]
        layer_rows = json.loads((trial.last_result or {}).get(LAYERS_FIELD) or "[]")
        write_trial(self.root, self.sweep, row, curve_rows, layer_rows)
        self.written.add(spec["trial_id"])
        if self.progress is not None:
            self.progress.finished(trial.trial_id, status, spec["trial_id"], error, row)
        self.statuses[trial_triple(spec)] = status
        counts = count_statuses(self.statuses)
        self.catalog.update_counts(self.sweep, counts["completed"], counts["stopped_early"],
                                   counts["failed"])

    @staticmethod
    def _metrics(last: dict, curve: list[dict], status: str) -> dict[str, Any]:
        """Final metrics: the loop's own summary when it got to report one, else the curve's."""
        if not curve and status == "failed":
            return {}
        val_losses = [p["val_loss"] for p in curve if p.get("val_loss") is not None]
        val_loss = last.get("val_loss", val_losses[-1] if val_losses else None)
        elapsed = last.get("wall_time_s") or last.get("elapsed_s")
        tokens = last.get("tokens")
        finite = [v for v in val_losses if math.isfinite(v)]
        return {
            "val_loss": val_loss,
            "best_val_loss": last.get("best_val_loss", min(finite) if finite else None),
            "val_ppl": last.get("val_ppl", math.exp(min(val_loss, 700)) if val_loss else None),
            "train_loss": last.get("train_loss"),
            "psnr": last.get("psnr"),
            "ssim": last.get("ssim"),
            "tokens": tokens,
            "steps": last.get("steps", last.get("step")),
            "wall_time_s": elapsed,
            "tokens_per_s": last.get("tokens_per_s", tokens / elapsed if tokens and elapsed else None),
        }


def count_statuses(statuses: dict) -> dict[str, int]:
    counts = {"completed": 0, "stopped_early": 0, "failed": 0}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    return counts


def _init_ray(options: SweepOptions) -> tuple[bool, str | None]:
    """Start local Ray (never silently join another cluster) or join `--address`.

    Returns whether we started it (so we shut it down) and, for a local Ray, its session
    folder (so we remove it after: each start leaves one in Ray's temp directory).
    """
    import ray

    if ray.is_initialized():
        return False, None
    address = options.address or "local"
    kwargs: dict[str, Any] = {"include_dashboard": False} if address == "local" else {}
    if address == "local":
        kwargs["num_cpus"] = os.cpu_count()
    else:
        _use_cluster_token()
    context = ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR,
                       configure_logging=True, **kwargs)
    local = address == "local" and context.address_info.get("session_dir")
    return True, local or None


def _remove_session(session_dir: str | None) -> None:
    """Delete a shut-down local Ray's session folder and the `session_latest` link to it."""
    if not session_dir:
        return
    shutil.rmtree(session_dir, ignore_errors=True)
    latest = Path(session_dir).parent / "session_latest"
    if latest.is_symlink() and Path(os.readlink(latest)).name == Path(session_dir).name:
        latest.unlink(missing_ok=True)


def _as_interrupt(signum: int, frame: Any) -> None:
    """Handle a signal as Ctrl-C: through the SIGINT handler in force (`sigint_deferred`'s
    while a trial is being filed), else KeyboardInterrupt (even where SIGINT is ignored)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (`kill`, a closed terminal) stop the sweep as Ctrl-C does: it is
    marked `interrupted` and resumable. Only the main thread may set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _as_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)


def _use_cluster_token() -> None:
    """Authenticate to a cluster the way `ray start` does.

    Ray 2.5x starts a head with token auth when RAY_AUTH_MODE is unset and a token exists
    (~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH), but a driver joining it
    does not send that token unless told to. This applies Ray's own rule (an explicit
    RAY_AUTH_MODE wins) and refreshes Ray's cached config, which an env var alone cannot.
    """
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token auth
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _scheduler(options: SweepOptions, budgets: set[int] | None):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    if options.scheduler == "fifo":
        return FIFOScheduler()
    if budgets is None or len(budgets) != 1:
        many = "per-candidate" if budgets is None else f"{len(budgets)} different"
        raise UserError(f"ASHA compares trials at one token budget; this space's trials train "
                        f"{many} budgets (per-variant recipes or tokens_per_param): use "
                        "--scheduler fifo", key="--scheduler")
    (budget,) = budgets
    grace = options.grace_tokens or max(1, budget // 9)
    if grace >= budget:
        raise UserError(f"grace period {grace} tokens is not below the trial budget {budget}",
                        key="--grace-tokens")
    if not options.reduction_factor > 1:
        raise UserError("must be more than 1", key="--reduction-factor")
    return ASHAScheduler(time_attr="tokens", metric="val_loss", mode="min", max_t=budget,
                         grace_period=grace, reduction_factor=options.reduction_factor)


@dataclass
class _Checked:
    """What the up-front checks established; nothing is on disk yet."""

    space: Any
    storage_url: str
    seeds: list[int]
    scheduler: Any
    candidates: list | None  # the grid's; None for an Optuna search
    notices: list[str]
    data_hash: str
    budget: int | None  # the trials' one token budget; None when recipes differ (no ASHA)


def run_sweep(options: SweepOptions, console: Any = None) -> SweepOutcome:
    """Run (or finish) a sweep; see the module docstring for what lands where."""
    from shapesweep.results.catalog import Catalog
    from shapesweep.sweep.lease import sweep_lease

    checked = _check(options)
    catalog = Catalog(checked.storage_url)
    with sweep_lease(catalog, options.name):
        _compact(options.root, options.name)
        return _drive(options, checked, catalog, console)


def _check(options: SweepOptions) -> _Checked:
    """Everything that can refuse the sweep, before anything is written anywhere."""
    from shapesweep.results.catalog import default_catalog_url
    from shapesweep.results.store import validate_sweep_name
    from shapesweep.search_spaces.space import check_seeds_option, load_space
    from shapesweep.sweep.trackers import check_trackers

    check_trackers(options.log_to)
    space = load_space(options.space)  # an unreadable file is one line (safe_yaml)
    options.name = validate_sweep_name(options.name or space.name)
    seeds = check_seeds_option(options.seeds or list(space.seeds))
    candidates, notices = None, []
    if options.search == "grid":
        from shapesweep.search_spaces.solver import plan

        if options.multi_objective:
            raise UserError("a second objective needs --search optuna", key="--multi-objective")
        solved = plan(space)
        candidates = solved.candidates
        notices = [f"{space.name}: {solved.counts_line()}", *solved.dropped_lines()]
    elif options.search == "optuna":
        if options.multi_objective not in (None, "params_non_embedding", "flops_per_token"):
            raise UserError(f"unknown objective {options.multi_objective!r} "
                            "(params_non_embedding or flops_per_token)", key="--multi-objective")
    else:
        raise UserError(f"unknown search {options.search!r} (grid or optuna)", key="--search")
    budgets = sweep_budgets(space, candidates)
    scheduler = _scheduler(options, budgets)
    data_hash, data_notices = data_hash_for(space, candidates, _abs(options.data))
    storage_url = options.storage or default_catalog_url(options.root)  # makes a local root
    budget = next(iter(budgets)) if budgets and len(budgets) == 1 else None
    return _Checked(space, storage_url, seeds, scheduler, candidates,
                    [*notices, *data_notices], data_hash, budget)


def _compact(root: str, name: str) -> None:
    """Merge the sweep's result fragments; a failure is a warning, never a failed sweep.
    The lease makes this driver the sweep's only writer, and so its only compactor."""
    from shapesweep.results.store import compact

    try:
        compact(root, name, stale_s=0)  # no other writer while the lease is held
    except Exception as error:  # noqa: BLE001 - the results are intact either way
        print(f"warning: could not compact the results of sweep {name!r}: {error}",
              file=sys.stderr, flush=True)


def _drive(options: SweepOptions, checked: _Checked, catalog: Any, console: Any) -> SweepOutcome:
    """With the lease held: register the sweep, save how it runs, run what is missing."""
    from shapesweep.results.store import completed_keys, read_sweep_file, write_sweep_file

    name, space = options.name, checked.space
    statuses = completed_keys(options.root, name)
    rerun = {"failed"} if options.retry_failed else set()
    skip = {triple for triple, status in statuses.items() if status not in rerun}
    if checked.candidates is not None:
        from shapesweep.sweep.search import grid_specs

        specs, total = grid_specs(space, checked.candidates, checked.seeds, _abs(options.data),
                                  skip)
    else:
        specs, total = [], options.num_samples
    catalog.register(name, space.name, space.source_text, space.space_hash, total)
    _say(*checked.notices)
    if read_sweep_file(options.root, name, SPACE_FILE) is None:
        write_sweep_file(options.root, name, SPACE_FILE, space.source_text)
    # Paths in the sweep folder are relative to it (`resume` resolves them under the root it
    # is given); the data path is absolute, so a resume from another folder finds it.
    saved = asdict(options) | {"space": SPACE_FILE, "data": _abs(options.data),
                               "storage": _without_password(options.storage)}
    write_sweep_file(options.root, name, OPTIONS_FILE, json.dumps(saved, indent=2, sort_keys=True))

    os.environ.update({k: v for k, v in QUIET_ENV.items() if k not in os.environ})
    from ray import tune
    from shapesweep.sweep.checkpoints import CheckpointCleaner
    from shapesweep.sweep.progress import SweepProgress
    from shapesweep.sweep.trackers import tracker_callbacks
    from shapesweep.sweep.trainable import run_trial

    statuses = {triple: s for triple, s in statuses.items() if triple in skip}
    tune_kwargs: dict[str, Any] = {}
    if checked.candidates is not None:
        if not specs:
            catalog.set_status(name, "finished")
            return SweepOutcome(name, "finished", count_statuses(statuses), 0)
        param_space = {"spec": tune.grid_search(specs)}
        num_samples = 1
    else:
        param_space, num_samples, searcher, _ = _optuna_setup(
            options, space, checked.seeds[0], name, checked.storage_url, checked.budget)
        if num_samples <= 0:
            catalog.set_status(name, "finished")
            return SweepOutcome(name, "finished", count_statuses(statuses), 0)
        tune_kwargs["search_alg"] = searcher

    started_ray, session_dir = _init_ray(options)
    progress = SweepProgress(total=len(specs) if specs else num_samples, console=console,
                             enabled=options.progress)
    writer = ResultsWriter(options.root, name, checked.data_hash, catalog,
                           statuses, progress)
    resources = {"cpu": options.cpus_per_trial, "gpu": options.gpus_per_trial}
    ray_folder = _ray_storage(options.root, name).resolve()
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(
            run_trial, checkpoints=str(ray_folder), workers=options.workers_per_trial,
            resources=resources),
            # N > 1: the trial's actor only drives the Train workers, so it holds no CPU
            # (a Ray bundle must ask for something: one byte of memory)
            resources if options.workers_per_trial == 1 else {"cpu": 0, "memory": 1}),
        param_space=param_space,
        tune_config=tune.TuneConfig(
            scheduler=checked.scheduler, num_samples=num_samples,
            max_concurrent_trials=options.max_concurrent,
            # Reusing actors saves a process start per trial, but Ray 2.60 cannot reset an
            # actor whose trial the scheduler stopped (and then stalls), so only under FIFO.
            reuse_actors=options.scheduler == "fifo",
            # Trials are named by our trial id (KEY-sSEED) in Ray's folders and in trackers.
            trial_name_creator=_trial_name, trial_dirname_creator=_trial_name, **tune_kwargs),
        run_config=tune.RunConfig(
            name=f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
            storage_path=str(ray_folder), verbose=0,
            callbacks=[writer, progress, CheckpointCleaner(ray_folder, options.keep_checkpoints),
                       *_ray_loggers(),
                       *tracker_callbacks(options.log_to, name, str(ray_folder))],
            failure_config=tune.FailureConfig(max_failures=options.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1)),
    )
    # Failed trials are reported once, as one line each, by the progress display and in
    # their row's `error`; Ray's own tracebacks stay in ROOT/NAME/_ray/*/error.txt.
    logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
    catalog.set_status(name, "running")
    status = "failed"
    try:
        with progress, terminate_as_interrupt():
            tuner.fit()
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        catalog.set_status(name, status)
        if started_ray:
            import ray

            ray.shutdown()
            _remove_session(session_dir)
    _compact(options.root, name)
    return SweepOutcome(name, status, count_statuses(statuses), len(writer.written))


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
        print(line, file=sys.stderr, flush=True)


def _abs(path: str | None) -> str | None:
    return str(Path(path).resolve()) if path else None


def _optuna_setup(options: SweepOptions, space: Any, seed: int, name: str, storage_url: str,
                  budget: int | None):
    """The Optuna searcher, reconciled with what a killed driver left behind."""
    from shapesweep.results.store import load_trials
    from shapesweep.sweep.search import (
        SpecMaker,
        launched_count,
        make_optuna_search,
        open_storage,
        reconcile_study,
    )

    storage = open_storage(storage_url)
    data = _abs(options.data)
    searcher, study = make_optuna_search(
        space, name, storage, SpecMaker(space, seed, data),
        options.multi_objective, budget, sampler_seed=options.sampler_seed)
    trials = load_trials(options.root, [name])
    second = options.multi_objective
    finished = {
        row.trial_id: {"status": row.status,
                       "values": [row.val_loss] + ([getattr(row, second)] if second else [])}
        for row in trials.itertuples()
    }
    reconcile_study(study, finished)
    return {}, options.num_samples - launched_count(study), searcher, study
