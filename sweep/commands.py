"""CLI verbs `run`, `resume`, `status` and `export`.

Ray, pandas and the runner are imported inside the verbs, so `shapesweep --help` and
verbs that do not need them stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from shapesweep.search_spaces.cadence import CHECKPOINT_EVERY_S
from shapesweep.sweep.scheduling import SCHEDULERS
from shapesweep.sweep.strategies import SAMPLERS, STRATEGIES

from shapesweep.common import UserError, command_name, duration, human, write_csv
from shapesweep.common import plain as _clean
from shapesweep.families import base as families

PARALLEL = ("ddp", "fsdp")  # how N > 1 workers share a model (shapesweep.trainers.loop.train)
SWEEP_WEIGHTS = ""  # a bare `export --weights`: from the sweep's kept checkpoints
FOLDER_FORMATS = {"hf": "shapesweep.trainers.hf_export", "litgpt": "shapesweep.trainers.litgpt_export",
                  "torch": "shapesweep.trainers.torch_export"}
EXPORT_METRICS = ("val_loss", "best_val_loss", "val_ppl", "train_loss", "psnr", "ssim", "tokens",
                  "steps", "wall_time_s", "tokens_per_s")


def _add_root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default="./sweeps", help="results root (default ./sweeps)")
    parser.add_argument("--storage", default=None,
                        help="SQLAlchemy URL of the catalog + Optuna storage "
                        "(default sqlite:///ROOT/shapesweep.db)")


def _add_execution(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS") or None,
                        help="join a Ray cluster (auto or HOST:PORT); default: $RAY_ADDRESS when "
                             "set (`ray job submit` sets it), else start a Ray of this sweep's own")
    parser.add_argument("--max-concurrent", type=int, default=None, help="trials at once")
    parser.add_argument("--retry-failed", action="store_true", help="rerun failed trials too")
    parser.add_argument("--no-progress", action="store_true", help="no live progress table")


def add_arguments_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("space", help="a built-in space name or a YAML file")
    parser.add_argument("--name", default=None, help="sweep name (default: the space's name)")
    _add_root(parser)
    _add_execution(parser)
    parser.add_argument("--gpus-per-trial", "--gpus-per-worker", dest="gpus_per_trial",
                        type=float, default=0.0,
                        help="GPUs for each trial; with --workers-per-trial N, for each of its "
                             "N workers (the two names are one setting; default 0)")
    parser.add_argument("--cpus-per-trial", "--cpus-per-worker", dest="cpus_per_trial",
                        type=float, default=1.0,
                        help="CPUs for each trial, or for each of its workers (default 1)")
    parser.add_argument("--search", default="grid", help=f"{' or '.join(STRATEGIES)} (default grid)")
    parser.add_argument("--num-samples", type=int, default=8,
                        help="optuna: trials to complete in total (default 8)")
    parser.add_argument("--seeds", default=None,
                        help="N (seeds 0..N-1) or a comma list like 0,3,7 (default: the space's)")
    parser.add_argument("--scheduler", choices=SCHEDULERS, default="auto",
                        help="asha: the noise-aware ASHA, each candidate judged on its seed mean "
                             "(Ray's per-trial ASHA under --search optuna); fifo: every trial to "
                             "its budget; auto (default): asha for 9+ candidates with 2+ seeds "
                             "and cooldown rungs (train.decay wsd), else fifo")
    parser.add_argument("--grace-tokens", type=int, default=None,
                        help="ASHA grace period in tokens (default: an eighth of the budget, at "
                        "least 100 optimizer steps, at most half the budget)")
    parser.add_argument("--reduction-factor", type=float, default=3.0)
    parser.add_argument("--data", default=None, help="training data (default: built-in corpus)")
    parser.add_argument("--multi-objective", nargs="?", const="params_non_embedding",
                        choices=("params_non_embedding", "flops_per_token"), default=None,
                        help="optuna: trade val_loss against this (default params_non_embedding)")
    parser.add_argument("--sampler", default=None,
                        help=f"optuna: {', '.join(SAMPLERS)} (default tpe; nsga2 with "
                        "--multi-objective)")
    parser.add_argument("--sampler-seed", type=int, default=0, help="optuna sampler seed")
    parser.add_argument("--log-to", action="append", default=[], metavar="TRACKER",
                        help="also log each trial to mlflow, wandb or tensorboard (repeatable)")
    parser.add_argument("--max-failures", type=int, default=2,
                        help="retry a trial whose worker died up to N times, from its last "
                             "checkpoint (default 2)")
    parser.add_argument("--checkpoint-every", type=float, default=CHECKPOINT_EVERY_S,
                        metavar="SECONDS",
                        help="a trial saves a checkpoint at its first evaluation this long after "
                             "its last: a lost worker costs this much training and an evaluation "
                             "interval at most, and shorter trials save none; 0: at every "
                             f"evaluation (default {CHECKPOINT_EVERY_S:g})")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each ended trial's last checkpoint, for export --weights "
                             "(implies --checkpoint-every 0: every trial's is its final state)")
    parser.add_argument("--fresh-workers", action="store_true",
                        help="a new worker process for every trial, as for training code that "
                             "leaks state from one trial to the next (each trial then pays a "
                             "process start and torch's import: seconds)")
    parser.add_argument("--workers-per-trial", type=int, default=1,
                        help="train each trial data parallel on N Ray Train workers (DDP), each "
                             "with --cpus-per-trial CPUs and --gpus-per-trial GPUs (default 1)")
    parser.add_argument("--parallel", choices=PARALLEL, default="ddp",
                        help="with --workers-per-trial N > 1: ddp keeps a whole model on each "
                             "worker; fsdp shards parameters, gradients and AdamW state over "
                             "the N (default ddp)")


def parse_seeds(text: str | None) -> list[int] | None:
    """`N` (seeds 0..N-1) or `a,b,c`: every part a seed, each valid and given once."""
    from shapesweep.search_spaces.space import MAX_SEEDS, check_seeds_option

    if text is None:
        return None
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"cannot read {text!r} as a seed count or a comma list",
                        key="--seeds") from None
    if len(seeds) == 1 and "," not in text:  # a count
        seeds = list(range(min(seeds[0], MAX_SEEDS + 1)))
    return check_seeds_option(seeds)


EXIT_FAILED_TRIALS = 1  # the sweep ran, and some of its trials failed (2 is bad input, refused)


def _report(outcome: Any, root: str) -> int:
    """The sweep's one-line summary; the exit code: 0 when every trial completed or was
    stopped by the scheduler, EXIT_FAILED_TRIALS when the sweep holds failed ones."""
    from rich.console import Console
    from shapesweep.results.store import sweep_dir

    c = outcome.counts
    # soft_wrap: one line even in a log (rich wraps at 80 columns off a terminal)
    Console(soft_wrap=True).print(
        f"sweep [bold]{outcome.name}[/]: {outcome.status} - {c['completed']} completed, "
        f"{c['stopped_early']} stopped early, {c['failed']} failed "
        f"({outcome.launched} trials this run); results in {sweep_dir(root, outcome.name)}")
    return EXIT_FAILED_TRIALS if c["failed"] else 0


def run(args: argparse.Namespace) -> int:
    from shapesweep.sweep.runner import SweepOptions, run_sweep

    for flag, value in (("--max-concurrent", args.max_concurrent),
                        ("--num-samples", args.num_samples)):
        if value is not None and value < 1:
            raise UserError("must be at least 1", key=flag)
    for flag, value in (("--max-failures", args.max_failures),
                        ("--checkpoint-every", args.checkpoint_every)):
        if value < 0:
            raise UserError("must be 0 or more", key=flag)
    _check_resources(args)
    options = SweepOptions(
        space=args.space, name=args.name, root=args.root, address=args.address,
        gpus_per_trial=args.gpus_per_trial, cpus_per_trial=args.cpus_per_trial,
        max_concurrent=args.max_concurrent, search=args.search, num_samples=args.num_samples,
        seeds=parse_seeds(args.seeds), scheduler=args.scheduler, grace_tokens=args.grace_tokens,
        reduction_factor=args.reduction_factor, storage=args.storage, data=args.data,
        multi_objective=args.multi_objective, retry_failed=args.retry_failed,
        sampler=args.sampler, sampler_seed=args.sampler_seed, log_to=args.log_to, progress=not args.no_progress,
        max_failures=args.max_failures, checkpoint_every_s=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints, fresh_workers=args.fresh_workers,
        workers_per_trial=args.workers_per_trial, parallel=args.parallel,
    )
    with _resume_hint(args.name, args.space, args.root):
        return _report(run_sweep(options), args.root)


@contextmanager
def _resume_hint(name: str | None, space: str, root: str) -> Iterator[None]:
    """On Ctrl-C (or SIGTERM, SIGHUP: the runner turns them into one), the exact command that
    finishes the sweep, once it is one `resume` can find (its options file is written)."""
    try:
        yield
    except KeyboardInterrupt:
        from shapesweep.results.store import read_sweep_file
        from shapesweep.search_spaces.space import load_space

        name = name or load_space(space).name  # it loaded before: the sweep started
        if read_sweep_file(root, name, "sweep.json") is not None:
            print(f"interrupted; to finish the sweep: {command_name()} resume {shlex.quote(name)} "
                  f"--root {shlex.quote(root)}", file=sys.stderr, flush=True)
        raise


def _check_resources(args: argparse.Namespace) -> None:
    """Refuse trials that can never run, before the sweep starts."""
    workers = args.workers_per_trial
    if workers < 1:
        raise UserError("must be at least 1", key="--workers-per-trial")
    check_parallel(args.parallel, workers, "--workers-per-trial")
    check_placement(workers, ("--cpus-per-trial", args.cpus_per_trial),
                    ("--gpus-per-trial", args.gpus_per_trial), args.address, "--workers-per-trial")


def check_placement(workers: int, cpus: tuple[str, float], gpus: tuple[str, float],
                    address: str | None, workers_flag: str) -> None:
    """Refuse `workers` of (flag, CPUs) and (flag, GPUs) each that the local cluster (this
    machine) could never place: Ray would wait for them forever. A remote cluster's size is
    known only once joined (`--address`)."""
    for flag, value in (cpus, gpus):
        if value < 0:
            raise UserError(f"must not be negative (got {value:g})", key=flag)
    if address is not None:
        return
    have_gpus = _local_gpus() if gpus[1] else 0  # the driver imports torch only for this
    for (flag, per_worker), kind, have in ((cpus, "CPUs", os.cpu_count() or 1),
                                           (gpus, "GPUs", have_gpus)):
        if workers * per_worker > have:
            what = f"{workers} workers x {per_worker:g} {kind}" if workers > 1 else f"{per_worker:g} {kind} per trial"
            raise UserError(f"{what} do not fit this machine's {have} {kind} (the local cluster; "
                            "join a larger one with --address)",
                            key=workers_flag if workers > 1 else flag)


def check_parallel(parallel: str, workers: int, flag: str) -> None:
    """fsdp shards a model over workers: one worker has nothing to shard it over."""
    if parallel == "fsdp" and workers < 2:
        raise UserError(f"fsdp shards a model over workers: give {flag} 2 or more",
                        key="--parallel")


def _local_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def add_arguments_resume(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the sweep to finish")
    _add_root(parser)
    _add_execution(parser)


def resume(args: argparse.Namespace) -> int:
    from shapesweep.sweep.runner import load_options, run_sweep

    given = {name: getattr(args, name) for name in ("storage", "address", "max_concurrent")
             if getattr(args, name) is not None}
    options = replace(load_options(args.root, args.name), root=args.root,
                      retry_failed=args.retry_failed, progress=not args.no_progress, **given)
    with _resume_hint(args.name, options.space, args.root):
        return _report(run_sweep(options), args.root)


STATUS_FORMATS = ("table", "json", "csv")


def add_arguments_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", default=None, help="one sweep (default: all)")
    _add_root(parser)
    parser.add_argument("--top", type=int, default=20, help="trials to list for one sweep")
    # Checked in `status`, not by argparse: a bad value is then one line (argparse adds usage).
    parser.add_argument("--format", default="table",
                        help="table, json or csv: one sweep's candidates with mean, std and "
                        "the difference to the baseline with its 95%% interval; without NAME, "
                        "the sweeps with their trial counts")
    parser.add_argument("--baseline", default=None,
                        help="the variant the others are compared with (default: baseline, "
                        "when the sweep has it)")
    parser.add_argument("--metric", default="val_loss",
                        help="final metric to compare (val_loss; train_loss_tail, seed 002's "
                        "reported loss; psnr or ssim for vision)")


def _catalog(args: argparse.Namespace):
    from shapesweep.results.catalog import Catalog, default_catalog_url

    return Catalog(args.storage or default_catalog_url(args.root))


def _read_catalog(args: argparse.Namespace):
    """The catalog for a reader: None where the default one does not exist yet (a reader
    never creates a folder or a database)."""
    from shapesweep.results.store import local_folder

    if args.storage is None:
        folder = local_folder(args.root)
        if folder is None or not os.path.isfile(os.path.join(folder, "shapesweep.db")):
            return None
    return _catalog(args)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and digits < 4:  # shape details: k=2 and beta=0.25, not 2.000
        return f"{value:.{digits}g}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value / 1e6:.3f}M"
    return str(value)


STATUS_METRICS = ("val_loss", "best_val_loss", "val_ppl", "train_loss", "train_loss_tail", "psnr", "ssim")


def _check_status_args(args: argparse.Namespace) -> None:
    if args.format not in STATUS_FORMATS:
        raise UserError(f"{args.format!r} is not one of {', '.join(STATUS_FORMATS)}", key="--format")
    if args.metric not in STATUS_METRICS:
        raise UserError(f"{args.metric!r} is not one of {', '.join(STATUS_METRICS)}", key="--metric")
    if args.name is None and args.baseline is not None:
        raise UserError("needs one sweep NAME", key="--baseline")


def _reduction_factor(root: str, name: str) -> float | None:
    """ASHA's reduction factor from the options file `run` writes (shapesweep.sweep.runner.OPTIONS_FILE,
    not imported: it imports Ray); None when the sweep ran without ASHA."""
    from shapesweep.results.store import read_sweep_file, sweep_dir

    path = f"{sweep_dir(root, name)}/sweep.json"
    try:
        text = read_sweep_file(root, name, "sweep.json")
        options = json.loads(text) if text else {}
        if not isinstance(options, dict):
            raise ValueError("not a JSON object")
        if options.get("scheduler") != "asha":
            return None
        factor = float(options["reduction_factor"])
    except (OSError, ValueError, TypeError, KeyError) as error:  # garbled, truncated, unreadable
        problem = f"no {error}" if isinstance(error, KeyError) else str(error)
        raise UserError(f"not a sweep options file ({problem})", file=path) from None
    if not factor > 1:
        raise UserError(f"not a sweep options file (reduction_factor {factor})", file=path)
    return factor


def _status_document(args: argparse.Namespace, trials, curves) -> dict:
    """The one object `status NAME --format json` prints."""
    from shapesweep.results.roles import with_seed_roles
    from shapesweep.results.stats import asha_confirmation, rank_fidelity, stable_fraction
    from shapesweep.results.summary import comparisons

    variants = set(trials["variant"].dropna())
    baseline = args.baseline or "baseline"
    if args.baseline is not None and baseline not in variants:
        known = ", ".join(sorted(variants)) or "none recorded"
        raise UserError(f"sweep {args.name!r} has no variant {baseline!r} (its variants: {known})",
                        key="--baseline")
    trials = with_seed_roles(trials, args.root)
    document = comparisons(trials, args.name, args.root, args.metric, baseline)
    fidelity = rank_fidelity(trials, curves, args.metric)
    factor = _reduction_factor(args.root, args.name)
    return {
        **document,
        **_with_cooldowns(args, trials, curves),
        "rank_fidelity": _fidelity_points(fidelity),
        "rank_fidelity_stable_fraction": stable_fraction(fidelity) if len(fidelity) else None,
        "asha": asha_confirmation(trials, factor, args.metric) if factor else None,
    }


def _fidelity_points(fidelity) -> list[dict]:
    return [{"tokens": int(r.tokens), "budget_fraction": float(r.budget_fraction),
             "n_candidates": int(r.n_candidates), "kendall_tau": _clean(r.kendall_tau),
             "resolved_pairs": int(r.resolved_pairs),
             "swapped_resolved_pairs": int(r.swapped_resolved_pairs),
             "unresolved_pairs": int(r.unresolved_pairs)}
            for r in fidelity.itertuples()]


def _with_cooldowns(args: argparse.Namespace, trials, curves) -> dict:
    """The cooled evaluations' rank fidelity (when the curves have them, for val_loss) and
    the noise-aware ASHA's stop decisions (when it ran): `status`'s cooldown part."""
    from shapesweep.results.stats import cooled_rank_fidelity, stable_fraction
    from shapesweep.results.store import read_sweep_file

    out: dict[str, Any] = {}
    if args.metric == "val_loss" and "val_loss_cooled" in curves and curves["val_loss_cooled"].notna().any():
        cooled = cooled_rank_fidelity(trials, curves)
        out["rank_fidelity_cooled"] = _fidelity_points(cooled)
        out["rank_fidelity_cooled_stable_fraction"] = stable_fraction(cooled) if len(cooled) else None
    decisions = json.loads(read_sweep_file(args.root, args.name, "asha.json") or "[]")
    if decisions:  # shapesweep.sweep.paired_asha.DECISIONS_FILE (not imported: it imports Ray)
        out["asha_stopped"] = [d for d in decisions if d["stop"]]
    return out


def _flat(candidate: dict) -> dict:
    """A candidate as one CSV row: tuned values as `tuned.NAME` columns."""
    row = {k: v for k, v in candidate.items() if k != "tuned"}
    row.update({f"tuned.{k}": v for k, v in (candidate["tuned"] or {}).items()})
    return row


def _print_csv(document: dict) -> None:
    """One row per candidate; the sweep's seeds (which chose, which measured) on every row."""
    import sys

    seeds = {name: document[name] for name in ("choice_seeds", "measure_seeds")}
    write_csv([{**_flat(c), **seeds} for c in document["candidates"]], sys.stdout)


def _shape(candidate: dict, details: tuple[str, ...] | None = None) -> str:
    """`64x4 d_h=256 k=2`: width x depth, then those of `details` (default: all) that are the
    candidate's family's `label_fields` (compact)."""
    spec = families.find(candidate.get("family"))
    width, depth = candidate.get(spec.width if spec else "d_model"), candidate.get("n_layers")
    head = f"{_fmt(width)}x{_fmt(depth)}" if width is not None and depth is not None else ""
    inert = spec.inert_fields(candidate) if spec else frozenset()
    own = spec.label_fields if spec else families.label_fields()
    rest = [f"{n}={_fmt(candidate[n], 3)}" for n in (own if details is None else details)
            if n in own and candidate.get(n) is not None and n not in inert]
    return " ".join([head, *rest]).strip()


def _varying(candidates: list[dict]) -> tuple[str, ...]:
    """The shape details worth a table's room: d_h always, the others where candidates differ."""
    return tuple(n for n in families.label_fields()
                 if n == "d_h" or len({json.dumps(c.get(n)) for c in candidates}) > 1)


def _candidates_table(document: dict, narrow: bool = False):
    """Candidates ordered by their mean over seeds, with the difference to the baseline and
    the seeds an unresolved one needs; `narrow` (under 100 columns) leaves out the key (the
    trials table names it)."""
    from rich.table import Table
    from shapesweep.results.summary import interval_text, mean_text, tuned_text, verdict_text

    metric, baseline = document["metric"], document["baseline"]
    chosen_by = (f"the tuned value seeds {', '.join(map(str, document['choice_seeds']))} chose"
                 if document["choice_seeds"] else "its best tuned value")
    table = Table(title=f"candidates of {document['sweep']} by mean {metric} over seeds "
                  f"(each at {chosen_by})")
    tuned = any(c["tuned"] for c in document["candidates"])
    power = any(c["seeds_for_80pct_power"] for c in document["candidates"])
    details = _varying(document["candidates"])
    # off budget by more than 1% (a Pareto sweep, an ablation): each candidate's miss, beside its verdict
    missed = any(abs(c.get("budget_error") or 0.0) > BUDGET_SHOWN for c in document["candidates"])
    columns = [*([] if narrow else ["key"]), "variant", "shape", *(["tuned"] if tuned else []),
               *(["budget err"] if missed else []), f"{metric} mean ± std (n)"]
    # narrow: the verdict under the interval, and lines broken between numbers, never inside one
    columns += ([f"Δ vs {baseline} [95% CI], verdict"] if narrow
                else [f"Δ vs {baseline} [95% CI]", "verdict", *(["seeds for 80% power"] if power else [])]
                ) if baseline else []
    for column in columns:  # narrow terminals wrap cells at spaces instead of cutting them
        table.add_column(column, no_wrap=column == "key", overflow="fold")
    gap = "\n" if narrow else " "
    for c in document["candidates"]:
        cells = [*([] if narrow else [c["key"]]), c["variant"] or "-", _shape(c, details),
                 *([tuned_text(c)] if tuned else []),
                 *([_percent(c.get("budget_error"))] if missed else []), mean_text(c, metric, gap)]
        needed = c["seeds_for_80pct_power"]
        anchor = c["key"] == c["baseline_key"]
        star = "*" if c.get("eval_noise") else ""
        verdict = ["-" if anchor else interval_text(c).replace(" [", gap + "["), verdict_text(c) + star]
        if narrow:
            cells += [gap.join(verdict) + (f"{gap}{needed} seeds for 80%" if needed else "")] if baseline else []
        else:
            cells += [*verdict, *([str(needed) if needed else "-"] if power else [])] if baseline else []
        table.add_row(*cells)
    return table


def _no_verdict_lines(document: dict) -> list[str]:
    """Why each candidate without a verdict has none, and what to run (one line for a sweep
    without a baseline variant, where no candidate has one)."""
    details = _varying(document["candidates"])
    lines = [f"  {c['variant'] or c['key']} {_shape(c, details)} ({c['key']}): {c['why']}"
             + (f"; run: {c['to_run']}" if c["to_run"] else "")
             for c in document["candidates"] if c["why"] and c["key"] != c["baseline_key"]
             and (document["baseline"] or c["no_verdict"] != "no baseline")]
    if document["baseline"] is None:
        variants = sorted({c["variant"] for c in document["candidates"] if c["variant"]})
        lines.append(f"  every candidate: the sweep has no variant named baseline to compare with "
                     f"(its variants: {', '.join(variants) or 'none recorded'}; status "
                     f"{document['sweep']} --baseline VARIANT picks one)")
    return lines


BUDGET_SHOWN = 0.01  # a budget error above this is shown beside the verdicts


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _eval_noise_line(document: dict) -> str | None:
    """The footnote of the starred verdicts."""
    from shapesweep.results.stats import EVAL_Z

    if not any(c.get("eval_noise") for c in document["candidates"]):
        return None
    return (f"* within {EVAL_Z} x eval_se of zero: the held-out set's own noise could make this "
            "difference (raise train.eval_tokens to settle it)")


def _fidelity_line(document: dict, which: str = "rank_fidelity") -> str:
    """`which`: rank_fidelity, or rank_fidelity_cooled (the cooled evaluations')."""
    points = document[which]
    label = "rank fidelity" + (" of the cooled evaluations" if which.endswith("cooled") else "")
    if not points:
        return f"{label}: no evaluation point shared by 3 or more measured candidates"
    last = points[-1]
    if not last["resolved_pairs"]:
        return (f"{label}: none of the {last['unresolved_pairs']} pairs of candidates is resolved "
                "at the end (each paired 95% interval includes zero): no order to keep")
    taus = ", ".join(f"{p['budget_fraction']:.0%}: {_fmt(p['kendall_tau'], 2)}" for p in points)
    stable = document[f"{which}_stable_fraction"]
    line = (f"{label} (Kendall's tau over the {last['resolved_pairs']} pairs whose final difference "
            f"is resolved; {last['unresolved_pairs']} within noise, not counted; by budget fraction): {taus}")
    return line + (f"; stays >= 0.8 from {stable:.0%} of the budget" if stable is not None
                   else "; never stays >= 0.8")


def _stopped_lines(document: dict) -> list[str]:
    """The noise-aware ASHA's stopped candidates, each with the evidence it was stopped on."""
    lines = []
    for d in document.get("asha_stopped", []):
        tuned = " ".join(f"{k}={v}" for k, v in json.loads(d["tuned_json"]).items())
        cut = " ".join([d["cut_key"], *(f"{k}={v}" for k, v in json.loads(d["cut_tuned_json"]).items())])
        lines.append(f"stopped at {human(d['rung_tokens'])} tokens, all {len(d['losses'])} seeds: "
                     f"{' '.join(filter(None, [d['key'], tuned]))}, worse than {cut} by "
                     f"{d['delta']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]")
    return lines


def _asha_line(document: dict) -> str | None:
    asha = document["asha"]
    if not asha or not asha["stopped"]:
        return None
    share = "-" if asha["fraction"] is None else f"{asha['fraction']:.0%}"
    return (f"ASHA stopped {asha['stopped']} trials; {asha['checkable']} have a completed run of "
            f"the same candidate and tuned value, and {asha['confirmed']} of those ({share}) "
            "finished outside the top 1/reduction_factor")


def _sweep_records(records: dict, names: list[str], trials, running) -> list[dict]:
    """One record per sweep: what `status` lists, as `status --format json` prints it."""
    out = []
    for name in names:
        record = records.get(name)
        rows = trials[trials["sweep"] == name] if trials is not None else None
        counts = rows["status"].value_counts() if rows is not None else {}
        best = rows["val_loss"][rows["status"] == "completed"].min() if rows is not None else None
        out.append({
            "name": name, "space": record.space_name if record else None,
            "space_hash": record.space_hash if record else None,
            "status": record.status if record else None,
            "trials": record.n_candidates if record else None,  # the catalog counts trials
            **{state: int(counts.get(state, 0)) for state in ("completed", "stopped_early", "failed")},
            "running": int((running["sweep"] == name).sum()),
            "best_val_loss": _clean(best),
        })
    return out


def _sweeps_table(args: argparse.Namespace, sweeps: list[dict]):
    """One line per sweep; counts in one column, so the table fits 80 columns."""
    from rich.table import Table

    table = Table(title=f"sweeps under {args.root}")
    for column in ("name", "space", "status", "trials", "best val_loss"):
        table.add_column(column, overflow="fold", justify="right" if column == "best val_loss" else "left")
    for sweep in sweeps:
        parts = [f"{sweep[state]} {label}" for state, label in
                 (("completed", "completed"), ("stopped_early", "stopped"), ("failed", "failed"),
                  ("running", "running")) if sweep[state]]
        of = f" (of {sweep['trials']})" if sweep["trials"] is not None else ""
        table.add_row(sweep["name"], sweep["space"] or "-", sweep["status"] or "-",
                      (", ".join(parts) or "none") + of, _fmt(sweep["best_val_loss"]))
    return table


def _trials_table(name: str, trials, top: int):
    """The trials best first; an error column only when a trial has an error text."""
    from rich.table import Table

    table = Table(title=f"trials of {name}, best first (by val_loss)")
    errors = trials["error"].fillna("").astype(str).str.strip() if not trials.empty else None
    failed = bool(errors is not None and errors.ne("").any())
    columns = ("candidate", "status", "seed", "val_loss", "tokens", *(["error"] if failed else []))
    for column in columns:
        table.add_column(column, overflow="fold",
                         justify="right" if column in ("seed", "val_loss", "tokens") else "left")
    ordered = trials.sort_values(["val_loss"], na_position="last").head(top)
    for row in ordered.to_dict("records"):
        seed, loss, tokens = (_clean(row.get(c)) for c in ("seed", "val_loss", "tokens"))
        state = row["status"].replace("_", " ") + (f" at {human(tokens)}" if row["status"] == "stopped_early"
                                                    and tokens is not None else "")
        cells = [_candidate_name(row), state, _fmt(None if seed is None else int(seed)),
                 _fmt(loss), "-" if tokens is None else human(tokens)]
        error = row.get("error") if isinstance(row.get("error"), str) else ""
        table.add_row(*cells, *([error[:60]] if failed else []))
    return table


def _candidate_name(row: dict) -> str:
    """A trial's candidate as tables name it (`candidate_label`: variant, shape, tuned values);
    the key stays in `--format json`."""
    return families.candidate_label({k: _clean(v) for k, v in row.items() if k != "widths"})


def _running_table(name: str, running):
    """Trials training now (`shapesweep.results.live`): latest loss, tokens of the budget, ETA."""
    from rich.table import Table

    table = Table(title=f"running now in {name} (latest evaluation)")
    for column in ("candidate", "seed", "val_loss", "tokens", "elapsed", "ETA"):
        table.add_column(column, overflow="fold", justify="left" if column == "candidate" else "right")
    for row in running.sort_values("trial_id").to_dict("records"):
        tokens, budget, elapsed = (_clean(row.get(c)) for c in ("tokens", "train_tokens_budget", "wall_time_s"))
        done = "-" if tokens is None else human(tokens) + (f" of {human(budget)}" if budget else "")
        eta = (budget - tokens) * elapsed / tokens if tokens and budget and elapsed else None
        table.add_row(_candidate_name(row), _fmt(_clean(row.get("seed"))), _fmt(_clean(row.get("val_loss"))),
                      done, duration(elapsed), duration(eta))
    return table


def status(args: argparse.Namespace) -> int:
    import sys

    from rich.console import Console
    from shapesweep.results.live import live_sweeps, load_live
    from shapesweep.results.store import (
        FragmentCache,
        list_sweeps,
        load_curves,
        load_trials,
        unknown_sweep,
    )
    from shapesweep.results.summary import seeds_line

    _check_status_args(args)
    console = Console()
    catalog = _read_catalog(args)
    records = {r.name: r for r in catalog.list()} if catalog else {}
    if args.name is None:
        names = list(dict.fromkeys([*records, *list_sweeps(args.root), *live_sweeps(args.root)]))
        trials = load_trials(args.root, names) if names else None
        sweeps = _sweep_records(records, names, trials, load_live(args.root)[0])
        if args.format == "json":
            print(json.dumps(sweeps, indent=2))
        elif args.format == "csv":
            write_csv(sweeps, sys.stdout)
        else:
            console.print(_sweeps_table(args, sweeps))
        return 0

    record = records.get(args.name)
    cache = FragmentCache()  # each fragment read once: the curves need the trials again
    trials = load_trials(args.root, [args.name], cache=cache)
    running = load_live(args.root, [args.name])[0]
    if record is None and trials.empty and running.empty:
        raise unknown_sweep(args.name, args.root, [*records, *live_sweeps(args.root)])
    document = _status_document(args, trials, load_curves(args.root, [args.name], cache=cache))
    if args.format == "json":
        print(json.dumps(document, indent=2))
        return 0
    if args.format == "csv":
        _print_csv(document)
        return 0
    if record is not None:
        console.print(f"[bold]{record.name}[/]  space {record.space_name} ({record.space_hash})  "
                      f"status {record.status}  {len(document['candidates'])} candidates, "
                      f"{record.n_candidates} trials")  # the catalog's n_candidates counts trials
    counts = trials["status"].value_counts().to_dict() if not trials.empty else {}
    counts |= {"running": len(running)} if len(running) else {}
    console.print("  ".join(f"{k.replace('_', ' ')}: {v}" for k, v in sorted(counts.items()))
                  or "no trials yet")
    if document["candidates"]:
        console.print(_candidates_table(document, narrow=console.width < 100))
        # wrapped at the terminal's width (status fits 80 columns), between words
        for line in [seeds_line(document), *(f"warning: {w}" for w in document["warnings"])]:
            console.print(line, highlight=False, markup=False)
        reasons = _no_verdict_lines(document)
        if reasons:
            console.print("no verdict:", *reasons, sep="\n", highlight=False, markup=False)
        short = [f"  {c['variant'] or c['key']} ({c['key']}): {c['missing']}; run: {c['to_run_missing']}"
                 for c in document["candidates"] if c["missing"]]
        if short:
            console.print("missing seeds:", *short, sep="\n", highlight=False, markup=False)
        if _eval_noise_line(document):
            console.print(_eval_noise_line(document), soft_wrap=True)
        console.print(_fidelity_line(document), soft_wrap=True)
        if "rank_fidelity_cooled" in document:
            console.print(_fidelity_line(document, "rank_fidelity_cooled"), soft_wrap=True)
        for line in _stopped_lines(document):
            console.print(line, soft_wrap=True)
        if _asha_line(document) and "asha_stopped" not in document:  # Ray's per-trial ASHA
            console.print(_asha_line(document), soft_wrap=True)
    if len(running):
        console.print(_running_table(args.name, running))
    if not trials.empty:
        console.print(_trials_table(args.name, trials, args.top))
    return 0


def add_arguments_export(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the sweep")
    _add_root(parser)
    parser.add_argument("--top", type=int, required=True, help="how many configs (per group)")
    parser.add_argument("--per", choices=("family", "budget"), default=None,
                        help="take the top N of each family or of each budget")
    parser.add_argument("--metric", default="val_loss", help="rank by this trials column")
    parser.add_argument("--format", choices=("yaml", "json", *FOLDER_FORMATS), default="yaml",
                        help="hf: a Hugging Face LlamaForCausalLM folder per config "
                             "(conventional family); torch: a standalone PyTorch model.py "
                             "folder (any LM family); both need shapesweep[hf]")
    parser.add_argument("--weights", action="append", nargs="?", const=SWEEP_WEIGHTS,
                        metavar="DIR",
                        help="--format hf/torch: the trained weights go with each config; bare: "
                             "from the sweep's last checkpoints (run --keep-checkpoints); DIR: "
                             "a `train --save` folder, with the config of its shape (repeatable)")
    parser.add_argument("--tokenizer", metavar="JSON", default=None,
                        help="--format hf: the tokenizer.json the model was trained with "
                             "(default: the byte-level one of the built-in corpus and text data)")
    parser.add_argument("--out", required=True,
                        help="folder for the config files: empty, new, or holding only what an "
                             "earlier export wrote there (replaced)")
    parser.add_argument("--force", action="store_true",
                        help="write into an --out that holds other files too (they stay; an "
                             "earlier export's files are replaced)")
    parser.add_argument("--include-stopped", action="store_true",
                        help="rank stopped-early trials too (default: completed only)")


def _budget_groups(trials, record) -> Any:
    """Each trial's budget target: the budget column over (1 + budget_error), 3 digits."""
    from shapesweep.search_spaces.safe_yaml import parse_yaml
    from shapesweep.search_spaces.solver import METRIC_COLUMN
    from shapesweep.search_spaces.space import parse_space

    where = f"catalog sweep {record.name}"
    space = parse_space(parse_yaml(record.space_yaml, where), text=record.space_yaml, file=where)
    column = METRIC_COLUMN[space.budget.target_metric]
    target = trials[column] / (1 + trials["budget_error"].fillna(0))
    return target.map(lambda t: float(f"{t:.3g}"))


def export(args: argparse.Namespace) -> int:
    import yaml
    from shapesweep.results.roles import with_seed_roles
    from shapesweep.results.schema import TRIAL_COLUMNS
    from shapesweep.results.store import load_trials
    from shapesweep.search_spaces.configs import train_document

    if args.top < 1:
        raise UserError("must be at least 1", key="--top")
    if args.weights and args.format not in FOLDER_FORMATS:
        raise UserError("only with --format hf or torch", key="--weights")
    if args.tokenizer is not None and args.format != "hf":
        raise UserError("only with --format hf", key="--tokenizer")
    if args.metric not in TRIAL_COLUMNS.names:
        raise UserError(f"unknown column {args.metric!r}", key="--metric")
    out = Path(args.out)
    previous = _previous_export(out, args.force)
    trials = load_trials(args.root, [args.name])
    if trials.empty:
        from shapesweep.results.store import list_sweeps, unknown_sweep

        if args.name not in list_sweeps(args.root):
            raise unknown_sweep(args.name, args.root)
        raise UserError(f"sweep {args.name!r} under {args.root} has no trials yet", key="name")
    keep = {"completed", "stopped_early"} if args.include_stopped else {"completed"}
    trials = _seed_means(with_seed_roles(trials, args.root), args.metric, args.include_stopped)
    if args.per == "family":
        chosen = trials.groupby("family", sort=True).head(args.top)
    elif args.per == "budget":
        catalog = _read_catalog(args)
        record = catalog.get(args.name) if catalog else None
        if record is None:
            raise UserError(f"sweep {args.name!r} is not in the catalog", key="--per")
        chosen = trials.assign(_budget=_budget_groups(trials, record)).groupby(
            "_budget", sort=True).head(args.top)
    else:
        chosen = trials.head(args.top)
    if chosen.empty:
        raise UserError(f"sweep {args.name!r} has no {'/'.join(sorted(keep))} trials with "
                        f"{args.metric}", key="--metric")

    documents = []
    for rank, row in enumerate(chosen.to_dict("records"), start=1):
        document = json.loads(row["config_json"])
        # rows filed before candidate documents left out keys their family never reads
        document["train"] = train_document(document.get("train") or {}, row["family"])
        document["metrics"] = {m: _clean(row.get(m)) for m in EXPORT_METRICS} | {
            f"{args.metric}_std": _clean(row["std"]), "n_seeds": int(row["n"])}
        document["provenance"] = {
            "sweep": args.name, "trial_id": row["trial_id"], "seed": _clean(row["seed"]),
            "trial_ids": row["trial_ids"], "tuned": json.loads(row["tuned"]),
            "key": row["key"], "code_version": row.get("code_version"),
            "data_hash": row.get("data_hash"), "rank": rank, "ranked_by": args.metric,
        }
        documents.append((f"{rank:02d}-{_file_name(row)}", document))
    if args.format in FOLDER_FORMATS:
        exporter = importlib.import_module(FOLDER_FORMATS[args.format])
        folders = _weight_folders(args.root, args.name, documents, args.weights or [])
        tokenizer = _tokenizer_source(args) if args.format == "hf" else None
        return _export_folders(documents, out, folders, exporter, previous, tokenizer)

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, document in documents:
        path = out / f"{stem}.{args.format}"
        text = (yaml.safe_dump(document, sort_keys=False) if args.format == "yaml"
                else json.dumps(document, indent=2))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        written.append(path)
    _replace_previous(out, written, previous)
    for path in written:
        print(path)
    return 0


EXPORT_MANIFEST = ".shapesweep-export.json"  # what an export wrote into its --out
EXPORTED = re.compile(r"\d{2,}-[A-Za-z0-9._-]+")  # an exported file or folder's name (`_file_name`)
LEFT_OVER = re.compile(r"\..+\.\d+\.(tmp|old)")  # what an export killed midway leaves


def _file_name(row: dict) -> str:
    """An exported config's name after its rank: its variant (`01-baseline.yaml`), else its
    family; the rank keeps two of one variant apart. The key stays in its provenance."""
    name = row.get("variant") if isinstance(row.get("variant"), str) else ""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or row["family"]


def _previous_export(out: Path, force: bool) -> set[str]:
    """The names an earlier export wrote into `out` (its manifest), which this one replaces.
    Checked before any work: an `out` holding anything else is refused unless `force`, so a
    folder never mixes two exports (`train best/01-*.yaml` then matches one file)."""
    if out.exists() and not out.is_dir():
        raise UserError("is a file, not a folder", file=str(out), key="--out")
    if not out.is_dir():
        return set()
    try:
        listed = json.loads((out / EXPORT_MANIFEST).read_text())["files"]
        previous = {name for name in listed if isinstance(name, str) and EXPORTED.fullmatch(name)}
    except (OSError, ValueError, KeyError, TypeError):
        previous = set()
    others = sorted(p.name for p in out.iterdir()
                    if p.name not in previous | {EXPORT_MANIFEST} and not LEFT_OVER.fullmatch(p.name))
    if others and not force:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise UserError(f"holds files no earlier export wrote ({shown}): give an empty or new "
                        "folder, or --force to write beside them", file=str(out), key="--out")
    return previous


def _replace_previous(out: Path, written: list[Path], previous: set[str]) -> None:
    """Once the new files are in place: remove what the earlier export wrote that this one did
    not overwrite, and record what this one wrote."""
    import shutil

    for name in previous - {path.name for path in written}:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    tmp = out / f".{EXPORT_MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"files": sorted(path.name for path in written)}, indent=1))
    os.replace(tmp, out / EXPORT_MANIFEST)


def _seed_means(trials, metric: str, include_stopped: bool = False):
    """One row per candidate with a result (`shapesweep.results.stats.tuned_stats`: its
    chosen tuned value, measure seeds only, none stopped unless `include_stopped` ranks
    stopped trials as if they had ended), best first: the export metrics are means over its
    measure seeds, `std` and `n` those of `metric`."""
    from shapesweep.results.stats import (
        HIGHER_IS_BETTER,
        ROLE_COLUMN,
        canonical_tuned_column,
        tuned_stats,
    )

    trials = trials[trials["status"] != "failed"]
    finished = trials.assign(status="completed") if include_stopped else trials
    chosen = tuned_stats(finished, metric)
    chosen = chosen[chosen["chosen"]]
    finished = finished[(finished["status"] == "completed") & finished[metric].notna()
                        & ~finished[ROLE_COLUMN]]  # a choice seed's trial is no measurement
    finished = finished.assign(tuned=canonical_tuned_column(finished["tuned_json"]))
    groups = finished.sort_values("seed").groupby(["key", "tuned"])
    numeric = [m for m in EXPORT_METRICS if m in finished.columns]
    chosen = chosen.drop(columns=numeric).join(groups[numeric].mean(), on=["key", "tuned"])
    chosen = chosen.join(groups["trial_id"].agg(list).rename("trial_ids"), on=["key", "tuned"])
    return chosen.sort_values("mean", ascending=metric not in HIGHER_IS_BETTER)


def _typed(document: dict[str, Any]):
    """(model config, TrainConfig) of an exported document (written by the sweep: valid)."""
    from shapesweep.search_spaces.configs import TrainConfig, make_config

    model = document["model"]
    config = make_config({**model, "family": document.get("family") or model.get("family")})
    return config, TrainConfig.model_validate(document.get("train") or {})


def _weight_folders(root: str, name: str, documents: list[tuple[str, dict]],
                    folders: list[str]) -> list[str]:
    """`--weights` folders, a bare `--weights` standing for the last checkpoint of each
    exported config's trial (`run --keep-checkpoints` keeps it)."""
    from shapesweep.sweep.checkpoints import latest
    from shapesweep.sweep.runner import _ray_storage

    if SWEEP_WEIGHTS not in folders:
        return folders
    kept = []
    for stem, document in documents:
        trial_id = document["provenance"]["trial_id"]
        found = latest(_ray_storage(root, name), trial_id)
        if found is None:
            raise UserError(f"sweep {name!r} kept no checkpoint of trial {trial_id} ({stem}): "
                            "run it with --keep-checkpoints, or give a `train --save` folder",
                            key="--weights")
        kept.append(str(found))
    return [folder for folder in folders if folder != SWEEP_WEIGHTS] + kept


def _weights(configs: dict[str, tuple], folders: list[str], exporter) -> dict[str, tuple]:
    """Each `--weights` folder's (train recipe, state dict), by the key of its exported config."""
    from shapesweep.search_spaces.configs import config_key
    from shapesweep.trainers import checkpoint

    found: dict[str, tuple] = {}
    for folder in folders:
        config, train, state = checkpoint.load_model(folder)
        key = config_key(config)
        if key not in configs:
            raise UserError(f"holds config {key}, which is not among the {len(configs)} exported "
                            "(see --top / --per)", file=folder, key="--weights")
        if key in found:
            raise UserError(f"a second folder for config {key}", file=folder, key="--weights")
        reason = exporter.unsupported(config, train)
        if reason:
            raise UserError(reason, file=folder, key="--weights")
        found[key] = (train, state)
    return found


def _tokenizer_source(args: argparse.Namespace) -> tuple[str | None] | None:
    """The tokenizer an hf export carries: (`--tokenizer`,), (None,) for bytes when the sweep
    read bytes (the built-in corpus or text), or None (with a notice) when it trained on
    token files whose tokenizer shapesweep never saw."""
    import sys

    from shapesweep.results.store import read_sweep_file
    from shapesweep.trainers.data import is_pretokenized

    if args.tokenizer is not None:
        return (args.tokenizer,)
    text = read_sweep_file(args.root, args.name, "sweep.json")  # runner.OPTIONS_FILE
    data = json.loads(text).get("data") if text else None
    if data and is_pretokenized(data):
        print(f"export: sweep {args.name!r} trained on token files ({data}); no tokenizer "
              "written (--tokenizer JSON adds the one they were made with)", file=sys.stderr)
        return None
    return (None,)


def _export_folders(documents: list[tuple[str, dict]], out: Path, weight_folders: list[str],
                    exporter, previous: set[str] = frozenset(),
                    tokenizer_source: tuple[str | None] | None = None) -> int:
    """One folder per config (`exporter.write_folder`, and the tokenizer when
    `tokenizer_source` names one: (path,) or (None,) for bytes); every check runs before
    anything is written; what an earlier export wrote there (`previous`) is replaced."""
    import shutil

    import yaml
    from shapesweep.search_spaces.configs import config_key

    exporter.require()
    configs = {}
    for stem, document in documents:
        config, train = _typed(document)
        reason = exporter.unsupported(config, train)
        if reason:
            raise UserError(f"{stem}: {reason}", key="--format")
        configs[config_key(config)] = (stem, document, config, train)
    weights = _weights(configs, weight_folders, exporter)
    tokenizer = None
    if tokenizer_source is not None:
        tokenizer = exporter.read_tokenizer(tokenizer_source[0])
        for _, _, config, _ in configs.values():
            exporter.check_vocab(tokenizer, config.vocab_size, tokenizer_source[0])

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, (stem, document, config, train) in configs.items():
        path, tmp = out / stem, out / f".{stem}.{os.getpid()}.tmp"
        trained, state = weights.get(key, (train, None))  # weights: the recipe they ran under
        tmp.mkdir()
        try:
            (tmp / "shapesweep.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
            exporter.write_folder(tmp, config, trained, state)
            if tokenizer is not None:
                exporter.write_tokenizer(tmp, tokenizer)
            if path.exists():  # a previous export of the same config: swap it out whole
                old = out / f".{stem}.{os.getpid()}.old"
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old)
            else:
                os.replace(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        written.append(path)
    _replace_previous(out, written, previous)
    for path in written:
        print(path)
    return 0
