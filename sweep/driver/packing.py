"""Trials that fit their memory, checked before Ray starts (`run`, `resume`): each candidate
against its share of a GPU, or the trials that run at once against this machine's memory,
from the memory model (`shapesweep.trainers.memory`). An Optuna search's candidates are known
only as its trials start; each then checks itself (`memory.check_fits`)."""

from __future__ import annotations

import os

from shapesweep.common import UserError
from shapesweep.search_spaces.configs import config_key
from shapesweep.search_spaces.solver import Candidate
from shapesweep.search_spaces.space import SearchSpace
from shapesweep.sweep.options.sweep_options import SweepOptions
from shapesweep.trainers import memory
from shapesweep.trainers.memory import device_bytes, parse_size


def check_memory(options: SweepOptions, space: SearchSpace, candidates: list[Candidate] | None) -> None:
    """Refuse, before Ray starts, a sweep whose trials cannot fit their memory: on GPUs, a
    candidate whose predicted peak at micro-batch 1 exceeds its --gpus-per-trial share of
    the card (each trial then gets the largest micro-batch that fits its share, and caps its
    process there: shapesweep.trainers.fitting); on CPUs, the trials that run at once (at most
    --max-concurrent, and as many as the CPUs hold) together exceeding this machine's memory."""
    if not candidates:
        return
    trains = [space.train_for(candidate=c) for c in candidates]
    workers, gpus = options.workers_per_trial, options.gpus_per_trial
    shards = workers if options.parallel == "fsdp" else 1
    if gpus:
        card = _card_bytes(options)
        if card is None:  # a cluster's cards are known only once joined
            return
        share = int(min(gpus, 1.0) * card)
        for candidate, train in zip(candidates, trains, strict=True):
            need = memory.estimate(candidate.config, train, "cuda", 1, shards).total
            if not memory.fits(need, share):
                raise UserError(
                    f"{_named(candidate)} needs about {memory.size(need)} to train at "
                    f"micro-batch 1; a trial's share of the GPU is {gpus:g} x "
                    f"{memory.size(card)} = {memory.size(share)} ({memory.MARGIN:.0%} "
                    f"planned on): give each trial more of a GPU", key="--gpus-per-trial")
        return
    ram = memory.device_bytes("cpu")
    for candidate, train in zip(candidates, trains, strict=True):  # one trial alone, at its least
        need = memory.estimate(candidate.config, train, "cpu", 1, shards).total
        if not memory.fits(need, ram):
            raise UserError(f"{_named(candidate)} needs about {memory.size(need)} to train even at "
                            f"micro-batch 1; this machine has {memory.size(ram)} "
                            f"({memory.MARGIN:.0%} planned on)", key="model")
    peaks = sorted(((memory.estimate(c.config, t, "cpu", memory.chosen(c.config, t, "cpu",
                                                                        lambda: ram)).total, c)
                    for c, t in zip(candidates, trains, strict=True)),
                   key=lambda pair: pair[0], reverse=True)
    at_once = _trials_at_once(options, len(candidates) * space.trials_per_candidate())
    repeats = space.trials_per_candidate()
    largest = [peak for peak, _ in peaks for _ in range(repeats)][:at_once]
    need = sum(largest) * workers // shards
    if not memory.fits(need, ram):
        biggest, candidate = peaks[0]
        fitting = sum(1 for total in range(1, at_once + 1)
                      if memory.fits(sum(largest[:total]) * workers // shards, ram))
        fix = (f"run at most {fitting} at once (--max-concurrent {fitting})" if fitting
               else "give it a smaller train.micro_batch_size (or auto)")
        raise UserError(
            f"{at_once} trials at once need about {memory.size(need)} (the largest, "
            f"{_named(candidate)}, about {memory.size(biggest)} each); this machine has "
            f"{memory.size(ram)} ({memory.MARGIN:.0%} planned on): {fix}",
            key="--max-concurrent")


def _named(candidate: Candidate) -> str:
    return f"{candidate.config.family} candidate {config_key(candidate.config)}"


def _trials_at_once(options: SweepOptions, trials: int) -> int:
    """How many trials this machine runs at once: --max-concurrent, as many as its CPUs hold
    (--cpus-per-trial each), and no more than the sweep has."""
    at_once = min(options.max_concurrent or trials, trials)
    per_trial = options.cpus_per_trial * options.workers_per_trial
    if per_trial > 0 and options.address is None:
        at_once = min(at_once, max(1, int((os.cpu_count() or 1) // per_trial)))
    return max(1, at_once)


def _card_bytes(options: SweepOptions) -> int | None:
    """Each GPU's memory: --gpu-memory, else this machine's first GPU (None where it has
    none: the trials then run on a cluster joined with --address)."""
    if options.gpu_memory:
        return parse_size(options.gpu_memory, "--gpu-memory")
    import torch  # the driver imports torch only when a trial asks for a GPU

    return device_bytes("cuda") if torch.cuda.device_count() else None
