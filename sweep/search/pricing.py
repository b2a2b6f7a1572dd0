"""What a sweep costs before it starts: its FLOPs, GPU-hours, wall time on N GPUs and money.

`plan` and `run --dry-run` price a sweep from the project's exact accounting
(`shapesweep.search_spaces.accounting.account`: training FLOPs a token, PaLM's convention) and
its recipes' token budgets and evaluation cadence (`shapesweep.search_spaces.cadence`), at a
named GPU's dense bf16 peak (`shapesweep.trainers.compile_policy.PEAK_TFLOPS`) times an MFU:
the project's own measured compiled MFU for the candidate's family where
`trainers/gpu-figures.json` has one (`shapesweep.trainers.gpu_figures.mfu`), DEFAULT_MFU
otherwise, and the measured eager MFU (`compile_policy.EAGER_MFU`) for a candidate that runs
eagerly. A compiled trial also pays its expected first compile (`compile_policy.decide`).
Torch-free: planning never imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from shapesweep.common import UserError, did_you_mean
from shapesweep.families import base as families
from shapesweep.results.sequential import (
    DEFAULT_MIN_EFFECT,
    Design,
    check_min_effect,
    expected_seeds,
)
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.cadence import (
    at_steps,
    cooldown_points,
    cooldown_tokens,
    eval_steps,
    step_tokens,
    token_budget,
    total_steps,
)
from shapesweep.search_spaces.seeds import AdaptiveSeeds
from shapesweep.search_spaces.solver import Candidate
from shapesweep.search_spaces.space import BASELINE_VARIANT
from shapesweep.sweep.search.flag_values import DEFAULT_GPU, DEFAULT_SEED_SD, GPU_KINDS
from shapesweep.trainers import gpu_figures
from shapesweep.trainers.compile_policy import EAGER_MFU, PEAK_TFLOPS, CompileDecision

DEFAULT_MFU = 0.30  # a family with no measured figure: below the measured 29.7-40.2% (docs/gpu.md)
FORWARD_SHARE = 1 / 3  # an evaluation token runs the forward pass: 2 of the 6 FLOPs a parameter


@dataclass(frozen=True)
class Device:
    """The GPUs a sweep is priced on."""

    kind: str  # a GPU_KINDS key
    count: int  # --gpus
    price: float | None  # --gpu-hour-price, per GPU-hour

    @property
    def peak(self) -> float:
        """Dense bf16 FLOP/s of one GPU."""
        return PEAK_TFLOPS[self.name] * 1e12

    @property
    def name(self) -> str:
        return GPU_KINDS[self.kind][0]

    @property
    def memory(self) -> str:
        return GPU_KINDS[self.kind][1]


class PriceFlags(Protocol):
    """The flags a sweep is priced on (option_groups.PlanPriceOptions), as `plan`'s arguments
    and `run`'s options both hold them."""

    @property
    def gpu(self) -> str | None: ...
    @property
    def gpus(self) -> int | None: ...
    @property
    def gpu_hour_price(self) -> float | None: ...


def device_from(args: PriceFlags) -> Device:
    """The GPUs `plan` prices on, from its flags (each read and checked against its
    declaration before the verb ran: option_groups.PlanPriceOptions); an unknown --gpu is one
    line naming the kinds."""
    kind = (args.gpu or DEFAULT_GPU).lower()
    if kind not in GPU_KINDS:
        raise UserError(f"unknown GPU {args.gpu!r} ({did_you_mean(kind, GPU_KINDS)}known: "
                        f"{', '.join(GPU_KINDS)})", key="--gpu")
    count: int = 1 if args.gpus is None else args.gpus
    price: float | None = args.gpu_hour_price
    return Device(kind, count, price)


@dataclass(frozen=True)
class Mfu:
    value: float
    source: str  # where it comes from, in words


def mfu_for(family: str, compiled: bool) -> Mfu:
    """The MFU a candidate's trials are priced at, and its source."""
    if not compiled:
        return Mfu(EAGER_MFU, "eager: compile_policy.EAGER_MFU (measured on an H200)")
    spec = families.find(family)
    found = gpu_figures.mfu((spec.figures_name if spec else "") or family)
    if found is None:
        return Mfu(DEFAULT_MFU, f"no {family} figure: pricing.DEFAULT_MFU")
    key, figure = found
    value = cast(float, figure["value"])  # a number (tests/test_gpu_figures.py holds every value to one)
    return Mfu(float(value), f"gpu-figures.json {key} ({figure['device']}, "
                                       f"torch {figure['torch']})")


@dataclass(frozen=True)
class CandidatePrice:
    """One candidate's trials, priced."""

    trials: int
    train_flops: float  # all its trials', cooldown branches included
    eval_flops: float
    compile_s: float  # all its trials' first compiles
    gpu_s: float  # one trial after another on one GPU (each trial its GPU share's compute)
    path_s: float  # its longest chain: a choice trial, then a measure trial
    mfu: Mfu

    def fields(self, device: Device) -> dict:
        """The columns `plan` adds to the candidate's row."""
        out = {"trials": self.trials, "train_flops": self.train_flops,
               "eval_flops": self.eval_flops, "compile_s": round(self.compile_s, 1),
               "mfu": self.mfu.value, "gpu_hours": self.gpu_s / 3600}
        if device.price is not None:
            out["cost"] = round(self.gpu_s / 3600 * device.price, 2)
        return out


def price_candidate(space, candidate, decision: CompileDecision, device: Device,
                    measure: int, rungs: Sequence[float] = ()) -> CandidatePrice:
    """A candidate's trials (its tuned settings on the choice seeds, the chosen one on
    `measure` seeds), each its recipe's budget, evaluations and cooldown branches."""
    config = candidate.config
    train = space.train_for(candidate=candidate)
    family = config.family
    per_token = account(config, train.seq_len).flops_per_token
    tokens = token_budget(train, family)
    evaluated = extra = 0
    if families.get(family).task.reads_tokens:
        per_step = step_tokens(train, family)
        steps = total_steps(train, per_step)
        evals = eval_steps(train, steps, per_step, rungs)
        evaluated = len(evals) * train.eval_tokens
        cooled = cooldown_points(train, evals, at_steps(rungs, steps, per_step), steps) - {steps}
        extra = cooldown_tokens(train, cooled, steps, steps, per_step)
    trials = space.trials_per_candidate(list(range(measure)))
    train_flops = per_token * (tokens + extra) * trials
    eval_flops = per_token * FORWARD_SHARE * evaluated * trials
    mfu = mfu_for(family, decision.compile)
    compile_s = (decision.compile_s or 0.0) if decision.compile else 0.0
    trial_s = (train_flops + eval_flops) / trials / (device.peak * mfu.value) + compile_s
    chain = (2 if space.choice_seeds else 1) * trial_s
    return CandidatePrice(trials, train_flops, eval_flops, compile_s * trials, trial_s * trials,
                          chain, mfu)


def total_lines(prices: list[CandidatePrice], device: Device, gpus_per_trial: float) -> list[str]:
    """The sweep's total, in words: FLOPs, GPU-hours, wall time on the GPUs, money, sources."""
    train = sum(p.train_flops for p in prices)
    evaluated = sum(p.eval_flops for p in prices)
    gpu_s = sum(p.gpu_s for p in prices)
    compile_s = sum(p.compile_s for p in prices)
    # Trials that share a GPU (--gpus-per-trial below 1) add no compute but each runs slower:
    # the wall time is the work over the GPUs, or the longest choose-then-measure chain.
    chain = max((p.path_s for p in prices), default=0.0) / (gpus_per_trial or 1.0)
    wall = max(gpu_s / device.count, chain)
    sources = sorted({p.mfu.source + f" {p.mfu.value:.1%}" for p in prices})
    money = (f"; {gpu_s / 3600 * device.price:,.2f} at {device.price:g} a GPU-hour"
             if device.price is not None else "")
    return [f"price: {train:.3g} training + {evaluated:.3g} evaluation FLOPs; "
            f"{gpu_s / 3600:,.1f} GPU-hours on {device.name} ({device.peak / 1e12:g} TFLOP/s dense "
            f"bf16), {_duration(wall)} wall on {device.count} GPU{'s' * (device.count > 1)}"
            f"{money}; compile {compile_s / 3600:,.2f} GPU-hours of it "
            "(compile_policy.compile_seconds per compiled trial)",
            f"price MFU: {'; '.join(sources)}"]


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


def price_sweep(space, candidates: list, decisions: list[CompileDecision], device: Device,
                measure: int, rungs: Sequence[float] = ()) -> list[CandidatePrice]:
    """Every candidate's price, in the candidates' order."""
    return [price_candidate(space, candidate, decision, device, measure, rungs)
            for candidate, decision in zip(candidates, decisions, strict=True)]


def short_price(prices: list[CandidatePrice], device: Device) -> str:
    """GPU-hours (and money) in a few words, for a line that compares two seed counts."""
    gpu_h = sum(p.gpu_s for p in prices) / 3600
    money = f", {gpu_h * device.price:,.2f}" if device.price is not None else ""
    return f"{sum(p.trials for p in prices)} trials, {gpu_h:,.1f} GPU-hours on {device.name}{money}"


def adaptive_line(at_min: list[CandidatePrice], at_max: list[CandidatePrice], baseline: int,
                  expected: dict[str, tuple[float, float]], seeds: tuple[int, int], device: Device) -> str:
    """`plan`'s price of adaptive seeds {min, max}: the most it costs (every candidate on max
    seeds, the table's figures) and what it is expected to cost under each assumption of
    `expected` (its words -> mean seeds of a compared candidate and of the baseline, from
    `shapesweep.results.sequential.expected_seeds`): each candidate's price on min seeds
    plus a measure seed's price for every seed past min."""
    low, high = seeds

    def cost(candidate: float, base: float) -> tuple[float, float]:
        trials = gpu_s = 0.0
        for i, (a, b) in enumerate(zip(at_min, at_max, strict=True)):
            extra = (base if i == baseline else candidate) - low
            step = (b.gpu_s - a.gpu_s) / (high - low) if high > low else 0.0
            trials += a.trials + extra
            gpu_s += a.gpu_s + extra * step
        return trials, gpu_s / 3600

    most = (sum(p.trials for p in at_max), sum(p.gpu_s for p in at_max) / 3600)
    parts = [f"{t:,.0f} trials, {h:,.1f} GPU-hours {why}"
             for why, (t, h) in ((why, cost(*pair)) for why, pair in expected.items())]
    return (f"adaptive seeds {low}-{high}: at most {most[0]} trials, {most[1]:,.1f} GPU-hours on "
            f"{device.name} (every candidate on {high} seeds: the figures above); expected "
            + "; ".join(parts))


def adaptive_price(candidates: list[Candidate], at_min: list[CandidatePrice], at_max: list[CandidatePrice],
                   seeds: AdaptiveSeeds, device: Device, min_effect: float | None,
                   seed_sd: float | None) -> str:
    """`plan`'s line for adaptive seeds: the largest price and the expected one, simulated
    (`expected_seeds`) with every effect at `min_effect` and with none, at `seed_sd` (each
    the stated default when not given), saying so."""
    effect = check_min_effect(min_effect) if min_effect is not None else DEFAULT_MIN_EFFECT
    sd = seed_sd or DEFAULT_SEED_SD
    bases = [i for i, c in enumerate(candidates) if c.variant == BASELINE_VARIANT]
    if len(bases) != 1 or len(candidates) < 2:
        return (f"adaptive seeds {seeds.min}-{seeds.max}: no one baseline with a candidate to compare "
                "(`run` refuses it); at most the figures above")
    design, m = Design(seeds.min, seeds.max, effect), len(candidates) - 1
    expected = {f"if every effect is {effect:g}": expected_seeds(design, m, effect, sd),
                "if none differs": expected_seeds(design, m, 0.0, sd)}
    where = (f"(simulated, docs/statistics.md: {m} comparisons, a paired seed sd of {sd:g}"
             f"{'' if seed_sd else ' (the default)'}, --min-effect {effect:g}"
             f"{'' if min_effect else ' (the default)'})")
    return f"{adaptive_line(at_min, at_max, bases[0], expected, (seeds.min, seeds.max), device)} {where}"
