"""`shapesweep train CONFIG`: train one candidate (as `plan`/`export` write it) on real data."""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import replace
from pathlib import Path

from shapesweep.common import UserError, duration, human, is_tty
from shapesweep.families.base import of
from shapesweep.search_spaces.candidate_file import load_candidate
from shapesweep.search_spaces.safe_yaml import read_yaml
from shapesweep.sweep.cli.verb_table import TrainArgs
from shapesweep.sweep.driver.ray_session import check_address, init_ray, quiet, stop_ray
from shapesweep.sweep.verbs.run_command import check_parallel, check_placement
from shapesweep.trainers import fitting
from shapesweep.trainers.parallel import (
    check_compilable,
    check_shardable,
    check_split,
    sequences_per_step,
)
from shapesweep.trainers.spec import TrialSpec
from shapesweep.trainers.threads import free_cores, usable_cores, use_threads

SPACE_KEYS = ("budget", "search", "solve", "variants", "constraints", "seeds")  # only a space has them


def _print_summary(result, config, train, threads: int | None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{config.family} trained on {result.tokens:,} "
                        f"{'images' if result.psnr is not None else 'tokens'}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [("val_loss", f"{result.val_loss:.4f}"), ("best_val_loss", f"{result.best_val_loss:.4f}")]
    if result.val_loss_se is not None and result.val_loss_se == result.val_loss_se:  # not NaN
        rows.append(("val_loss_se", f"{result.val_loss_se:.4f}"))
    if result.val_ppl is not None:
        rows.append(("val_ppl", f"{result.val_ppl:.3f}"))
    for name in ("psnr", "ssim", "accuracy"):
        if getattr(result, name) is not None:
            rows.append((name, f"{getattr(result, name):.4f}"))
    rows += [("train_loss", f"{result.train_loss:.4f}")]
    if result.train_loss_tail is not None:
        rows.append(("train_loss_tail", f"{result.train_loss_tail:.4f}"))
    rows += [("steps", f"{result.steps:,}"),
             ("tokens_per_s", f"{result.tokens_per_s:,.0f}"),
             ("params_measured", f"{result.params_measured:,}"),
             ("wall_time_s", f"{result.wall_time_s:.1f}"), ("data_hash", result.data_hash[:16])]
    rows += [("threads", str(threads))] if threads else []
    if result.stopped:
        rows.append(("stopped", "early"))
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


def _evaluation_line(metrics: dict) -> None:
    """One evaluation as a plain, flushed line (a log cannot show a redrawn bar)."""

    tokens, elapsed = metrics.get("tokens") or 0, metrics.get("elapsed_s") or 0.0
    scores = " ".join(f"{name} {metrics[name]:.4f}" for name in ("train_loss", "val_loss", "psnr")
                      if metrics.get(name) is not None)
    print(f"train: step {metrics['step']} tokens {human(tokens)} {scores} "
          f"{human(tokens / elapsed if elapsed else 0)} tokens/s elapsed {duration(elapsed)}",
          file=sys.stderr, flush=True)


def _resume_hint(checkpoint_dir: str | None) -> str:
    if checkpoint_dir:
        return (f"the checkpoint in {checkpoint_dir} holds the last evaluation: the same command "
                "(same --checkpoint-dir) resumes from it")
    return "no --checkpoint-dir was given, so a rerun starts over (--checkpoint-dir DIR makes it resumable)"


def refuse_space(path: str) -> None:
    """A search space given where a candidate belongs gets a pointer, not 'd_model: Field required'."""
    if not Path(path).is_file():
        return  # load_candidate says so
    doc = read_yaml(path)
    if isinstance(doc, dict) and "model" not in doc and any(k in doc for k in SPACE_KEYS):
        raise UserError("this is a search space, not a candidate config; use `shapesweep run` "
                        "or `shapesweep plan --out DIR`", file=path)


def check_device(text: str | None) -> None:
    """`--device` names a device this machine has, or one line says why not (before any work)."""
    if text is None:
        return
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        raise UserError(f"{text!r} is not a torch device (cpu, cuda, cuda:1, mps, ...)",
                        key="--device") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"{text!r}: CUDA is not available here (no GPU, or a CPU build of torch)",
                        key="--device")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UserError(f"{text!r}: this machine has {torch.cuda.device_count()} GPU(s)", key="--device")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"{text!r}: MPS is not available here", key="--device")
    if device.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"{text!r}: shapesweep trains on cpu, cuda or mps", key="--device")


def _check_workers(args: TrainArgs) -> dict[str, float]:
    """Refuse workers that can never run (before any work); their resources ({cpu, gpu})."""
    import torch

    if args.workers < 1:
        raise UserError("must be at least 1", key="--workers")
    check_parallel(args.parallel, args.workers, "--workers")
    cuda = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu")).type == "cuda"
    gpus = (1.0 if cuda else 0.0) if args.gpus_per_trial is None else args.gpus_per_trial
    if args.workers > 1:
        check_placement(args.workers, ("--workers", 1.0), ("--gpus-per-worker", gpus),
                        args.address, "--workers")
        check_address(args.address)  # a cluster nothing answers at: one line, not minutes
        if cuda and not gpus:
            raise UserError("0 GPUs per worker trains on the CPU, not on cuda (--device): "
                            "give each worker a GPU, or --device cpu", key="--gpus-per-worker")
    return {"cpu": 1.0, "gpu": gpus}


def _train_on_workers(args: TrainArgs, trial: TrialSpec, resources: dict[str, float]):
    """`trial` on `args.workers` Ray Train workers (`shapesweep.sweep.driver.trainable.train_on_workers`)
    of a local Ray, or of `--address`'s cluster; its paths made absolute for the workers."""
    # Lazy: the trial process imports Ray Tune and pandas, which a one-process `train` never needs.
    from shapesweep.sweep.driver.trainable import train_on_workers

    def absolute(path: str | None) -> str | None:
        return None if path is None else str(Path(path).resolve())

    trial = replace(trial, data=absolute(trial.data), tokenizer=absolute(trial.tokenizer),
                    checkpoint_dir=absolute(trial.checkpoint_dir), save_dir=absolute(trial.save_dir))
    on_ctrl_c = signal.getsignal(signal.SIGINT)  # Ray Train installs its own while it trains
    with quiet():
        started, session = init_ray(args.address, then="then run the same command again")
        try:
            return train_on_workers(trial, args.workers, resources)
        finally:
            signal.signal(signal.SIGINT, on_ctrl_c)
            if started:
                stop_ray(session)


def _one_config(configs: list[str]) -> str:
    """The one CONFIG `train` takes; several (a glob that matched more) is one line."""
    if len(configs) > 1:
        shown = ", ".join(configs[:3]) + (f" and {len(configs) - 3} more" if len(configs) > 3 else "")
        raise UserError(f"train takes one config file, got {len(configs)}: {shown}", key="CONFIG")
    return configs[0]


def _threads(args: TrainArgs) -> int | None:
    """Torch threads for a one-process run: --threads, else the free cores; never more than
    this process may use. None with --workers (each worker uses its own CPU)."""
    if args.workers > 1:
        if args.threads is not None:
            raise UserError("with --workers each worker trains on the one CPU it holds",
                            key="--threads")
        return None
    if args.threads is None:
        return free_cores()
    if not 1 <= args.threads <= usable_cores():
        raise UserError(f"must be 1 to {usable_cores()} (the cores this process may use), "
                        f"got {args.threads}", key="--threads")
    return args.threads


def train(args: TrainArgs) -> int:
    """`shapesweep train`: every check first, then one process or `--workers` Ray Train workers."""
    path = _one_config(args.config)
    check_device(args.device)
    resources = _check_workers(args)
    threads = _threads(args)
    refuse_space(path)
    config, recipe = load_candidate(path)
    if args.workers > 1 and args.parallel == "fsdp":
        check_shardable(config)
        check_compilable(recipe)
    if args.workers > 1 and of(config).task.reads_tokens:  # before Ray starts (images: once they are read)
        check_split(sequences_per_step(recipe), args.workers, "--workers")
    if args.steps is not None or args.tokens is not None:
        from pydantic import ValidationError

        try:
            recipe = recipe.model_validate({**recipe.model_dump(), "steps": args.steps,
                                            "tokens": args.tokens})
        except ValidationError as error:
            flag = "--steps" if args.steps is not None else "--tokens"
            raise UserError(error.errors()[0]["msg"], key=flag) from None
    # A progress bar on a terminal; else (a log, or --json) one plain line per evaluation
    # on stderr, so stdout stays the one JSON object.
    bar = not args.json and is_tty(sys.stderr) and args.workers == 1
    trial = TrialSpec(config, recipe, device=args.device, data=args.data, tokenizer=args.tokenizer,
                      parallel=args.parallel, checkpoint_dir=args.checkpoint_dir,
                      save_dir=args.save, progress=bar)
    memory = {}  # one process: the micro-batch, the predicted and measured peak, OOM retries
    try:
        if args.workers == 1:
            assert threads is not None, "one process trains on a count of threads (_threads)"
            use_threads(threads)
            result, fitted = fitting.train(trial, None if bar else _evaluation_line)
            memory = fitted.fields()
        else:
            result = _train_on_workers(args, trial, resources)
    except KeyboardInterrupt:
        print(_resume_hint(args.checkpoint_dir), file=sys.stderr, flush=True)
        raise
    if args.json:
        summary = result.to_dict()
        summary.pop("curve")
        print(json.dumps({"family": config.family, **summary, **memory,
                          **({"threads": threads} if threads else {})}))
    else:
        _print_summary(result, config, recipe, threads)
    return 0
