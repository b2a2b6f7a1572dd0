"""The option groups several verbs take, each option declared once with its type, default,
range and help: resources (what a trial holds and where it runs), search (how candidates
are searched, scheduled and compared), trainer (how one trial trains), and the flags that
price and judge a plan. The store's two (`--root`, `--storage`) are
`shapesweep.sweep.options.store_args.StoreOptions`.

A verb takes an option by naming it on its arguments (`same_as(ResourceOptions, "address")`
in sweep/cli/verb_table.py or sweep_options.SweepOptions), so a flag reads the same in every verb
that takes it. Light on purpose (no Ray, no torch, no numpy): `--help` is built from here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from shapesweep.sweep.options.fields import option, whole_count
from shapesweep.sweep.search.flag_values import (  # re-exported: the verbs read them here
    DEFAULT_GPU,
    DEFAULT_SEED_SD,
    GPU_KINDS,
    SCHEDULERS,
)
from shapesweep.sweep.search.strategies import SAMPLERS, STRATEGIES

PARALLEL = ("ddp", "fsdp")  # how N > 1 workers share a model (shapesweep.trainers.loop.train)
Parallel = Literal["ddp", "fsdp"]  # PARALLEL's type (shapesweep.trainers.spec.Parallel)
OBJECTIVES = ("params_non_embedding", "flops_per_token")  # --multi-objective's second objective
MAX_SEED = 2**32 - 1  # numpy and torch take seeds 0 <= seed < 2**32
SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?)(b?)\s*", re.IGNORECASE)
DEVICE = re.compile(r"(cpu|mps|cuda(:[0-9]+)?)")


def ray_address() -> str | None:
    """`--address`'s default: the cluster `ray job submit` names in $RAY_ADDRESS, if any."""
    return os.environ.get("RAY_ADDRESS") or None


def has_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU, without importing torch (as the driver does)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def gpus_here() -> float:
    """`run --gpus-per-trial`'s default: one GPU a trial where this machine has one, else 0."""
    return 1.0 if has_gpu() else 0.0


def memory_size(text: str | None) -> str | None:
    """`--gpu-memory` as given, once it reads as a size (trainers.memory.parse_size reads it)."""
    found = SIZE.fullmatch(text) if text is not None else None
    if text is not None and (not found or float(found[1]) <= 0):
        raise ValueError(f"cannot read {text!r} as a memory size (e.g. 80GiB, 141GB)")
    return text


def device_name(text: str | None) -> str | None:
    """`--device` as given, once it names a kind of device shapesweep trains on (whether this
    machine has it is the verb's check)."""
    if text is not None and not DEVICE.fullmatch(text):
        raise ValueError(f"{text!r} is not a device shapesweep trains on (cpu, cuda, cuda:1, mps)")
    return text


def seeds_list(text: str | list[int] | dict[str, int] | None) -> list[int] | dict[str, int] | None:
    """`N` (seeds 0..N-1), or seeds and inclusive ranges `0,3,7` / `0-2`, each valid and given
    once, or an adaptive range `min=A,max=B` kept as {"min": A, "max": B}
    (`search_spaces.seeds.parse_measure_seeds`)."""
    # Lazy: at check time only; pydantic and numpy would cost `--help` seconds.
    from shapesweep.search_spaces.seeds import option_value, parse_measure_seeds

    if text is None or isinstance(text, list | dict):
        return text
    return option_value(parse_measure_seeds(text))


@dataclass(kw_only=True)
class ResourceOptions:
    """What each trial holds, how many run at once, and the Ray cluster they run on."""

    address: str | None = option(
        None, "--address", cli_default=ray_address, resume=True,
        help="join a Ray cluster (auto or HOST:PORT); default: $RAY_ADDRESS when set (`ray job "
             "submit` sets it), else start a Ray of this command's own")
    max_concurrent: int | None = option(None, "--max-concurrent", at_least=1, resume=True,
                                        help="trials at once (default: as many as the resources hold)")
    gpus_per_trial: float | None = option(
        None, "--gpus-per-trial", "--gpus-per-worker", at_least=0,
        help="GPUs each trial holds; with N workers a trial (run --workers-per-trial, train "
             "--workers), each of its N workers (the two names are one setting). A fraction "
             "shares a GPU; 0 trains on the CPU. Default: 1 where the trial trains on a GPU "
             "(plan --device cuda, train --device cuda, run on a machine with a GPU), else 0")
    gpu_memory: str | None = option(
        None, "--gpu-memory", metavar="SIZE", resume=True, read=memory_size,
        help="each GPU's memory, e.g. 80GiB or 141GB, for the check that every trial fits its "
             "share (default: --gpu's card, else this machine's first GPU; give it when joining "
             "a cluster with --address); plan: implies --device cuda")
    cpus_per_trial: float = option(
        1.0, "--cpus-per-trial", "--cpus-per-worker", above=0,
        help="CPUs for each trial, or for each of its workers: more than 0, a fraction shares "
             "a core (default 1)")
    workers_per_trial: int = option(
        1, "--workers-per-trial", at_least=1,
        help="train each trial data parallel on N Ray Train workers (DDP), each with "
             "--cpus-per-trial CPUs and --gpus-per-trial GPUs (default 1)")


@dataclass(kw_only=True)
class SearchOptions:
    """How a sweep searches and schedules its candidates, and what it compares them on."""

    search: str = option("grid", "--search",  # checked by the strategy (one line)
                         help=f"{' or '.join(STRATEGIES)} (default grid)")
    num_samples: int = option(8, "--num-samples", at_least=1,
                              help="optuna: trials to complete in total (default 8)")
    seeds: list[int] | dict[str, int] | None = option(
        None, "--seeds", read=seeds_list, metavar="N|LIST|min=A,max=B",
        help="the measure seeds: a count N means seeds 0..N-1 (3 is 0,1,2); or a list of "
             "seeds and inclusive ranges like 0,3,7 or 0-2 or 0-2,5; or min=A,max=B: adaptive, "
             "more seeds only where a comparison is still open (default: the space's)")
    scheduler: str = option(  # saved resolved (shapesweep.sweep.search.scheduling.choose)
        "auto", "--scheduler", choices=SCHEDULERS,
        help="asha: the noise-aware ASHA, each candidate judged on its seed mean (Ray's "
             "per-trial ASHA under --search optuna); fifo: every trial to its budget; auto "
             "(default): fifo, with the reason (no committed study shows the noise-aware ASHA "
             "safe: docs/scheduling.md)")
    grace_tokens: int | None = option(
        None, "--grace-tokens", read=whole_count, above=0,
        help="ASHA grace period in tokens, a positive whole count like 200K (default: an eighth "
             "of the budget, at least 100 optimizer steps, at most half the budget)")
    reduction_factor: float = option(3.0, "--reduction-factor", above=1,
                                     help="ASHA keeps 1 in this many at each rung: more than 1 "
                                          "(default 3)")
    multi_objective: str | None = option(
        None, "--multi-objective", nargs="?", const=OBJECTIVES[0], choices=OBJECTIVES,
        help=f"optuna: trade val_loss against this (default {OBJECTIVES[0]})")
    sampler: str | None = option(
        None, "--sampler",  # checked by the strategy (one line)
        help=f"optuna: {', '.join(SAMPLERS)} (default tpe; nsga2 with --multi-objective)")
    sampler_seed: int | None = option(0, "--sampler-seed", at_least=0, at_most=MAX_SEED,
                                      help="optuna sampler seed, 0 to 2**32-1 (default 0)")
    metric: str = option("val_loss", "--metric",
                         help="the final metric trials are compared and ranked by: val_loss "
                              "(default); train_loss_tail, xformer's reported loss; psnr or "
                              "ssim for vision (export: any trials column)")


@dataclass(kw_only=True)
class TrainerOptions:
    """How one trial trains: its data, device, threads and how N workers share a model."""

    data: str | None = option(
        None, "--data", metavar="PATH",
        help="training data: a text file/folder, .bin/.npy tokens, Parquet with a `text` column; "
             "vision: MNIST folder/.npz or ImageNet-32 folder (default: the built-in corpus)")
    tokenizer: str | None = option(
        None, "--tokenizer", metavar="JSON",
        help="the Hugging Face tokenizer.json text data is read with (train), or the model was "
             "trained with (export --format hf) (default: bytes, as the built-in corpus)")
    device: str | None = option(
        None, "--device", read=device_name,
        help="cpu, cuda, cuda:1 or mps (default: cuda where this machine has a GPU); plan: "
             "the device each candidate's micro_batch_size and memory_peak_bytes are planned for")
    threads: int | None = option(
        None, "--threads",  # 1 to the cores this process may use: train's check names them
        help="torch threads (default: the cores not busy now, from the load average, at least "
             "1; with --workers, each worker's CPU)")
    parallel: str = option(
        "ddp", "--parallel", choices=PARALLEL,
        help="with N > 1 workers (run --workers-per-trial, train --workers): ddp keeps a whole "
             "model on each worker; fsdp shards parameters, gradients and AdamW state over the N "
             "(default ddp)")


@dataclass(kw_only=True)
class PlanPriceOptions:
    """What `plan` prices a sweep on (shapesweep.sweep.search.pricing) and what its verdict needs
    (shapesweep.sweep.search.verdict)."""

    gpu: str | None = option(
        None, "--gpu", metavar="KIND",
        help=f"the GPU the sweep is priced on: {', '.join(GPU_KINDS)} (dense bf16 peak from "
             f"shapesweep.trainers.compile_policy; default {DEFAULT_GPU}); plans memory on its "
             "card (80GB for h100) unless --gpu-memory says")
    gpus: int | None = option(
        None, "--gpus", metavar="N", at_least=1,
        help="GPUs the sweep runs on at once, for its wall time (default 1)")
    gpu_hour_price: float | None = option(
        None, "--gpu-hour-price", metavar="PRICE", at_least=0,
        help="price of one GPU-hour, to say what the sweep costs (no currency; 0: free)")
    min_effect: float | None = option(
        None, "--min-effect", metavar="NATS", above=0,
        help="the smallest difference in final loss from the baseline you want a verdict on: "
             "the measure seeds must give it 80%% power")
    seed_sd: float | None = option(
        None, "--seed-sd", metavar="NATS", above=0,
        help="with --min-effect: the spread over seeds of a paired difference "
             f"(default {DEFAULT_SEED_SD:g}, an assumed spread of the -small spaces' size)")


@dataclass(kw_only=True)
class ReportOptions:
    """How the verbs that print verdicts (`status`, `dashboard`) adjust them."""

    # Checked by the verb (shapesweep.results.multiplicity.check_method), not by argparse: a
    # bad value is then one line. Its names are spelled here so that `--help` imports no
    # statistics.
    adjust: str | None = option(
        None, "--adjust", metavar="METHOD",
        help="how a sweep's comparisons with the baseline are adjusted for their number: holm "
             "(default; family-wise error 5%%, Bonferroni-level simultaneous intervals), bh "
             "(Benjamini-Hochberg, false discovery rate 5%%) or none (each at 95%% alone); all "
             "pairs of candidates are a separate, exploratory family adjusted the same way")
