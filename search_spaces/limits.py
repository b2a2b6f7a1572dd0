"""How much one space may ask for, stated once: each limit is far above any real sweep and
low enough that `plan` (and `run` before Ray starts) answers in seconds, in bounded memory.

Every check counts from list lengths and range parameters alone, before a range becomes
an array, the grid is expanded, the solver runs or `tune:` combinations are multiplied
out, and refuses with one line naming the file, the key and the limit. The figures behind
each limit are in docs/limits.md.
"""

from __future__ import annotations

from shapesweep.common import UserError

MAX_VALUES = 1_000_000  # values of one searched dimension
MAX_SEEDS = 1000  # seeds of one sweep (each is one more trial per candidate)
MAX_VARIANTS = 256  # variants after family lists expand (the built-in spaces have at most 8)
MAX_RAW = 1_000_000  # raw grid points of a whole space: every variant's, text/flag combinations included
# Combinations of text, flag and k values: the solver takes each in one Python pass, where
# numeric values are numpy columns.
MAX_COMBOS = 2_000
# Raw points x depth of a family that solves each config's shape itself (the ><former's
# widths, by bisection over every layer): 10,000 is e.g. 400 (beta, alpha) points at 24 layers.
MAX_LAYER_SOLVES = 10_000
# Distinct shapes within the budget that the solver types and verifies one by one; each is a
# trial or more, so more is no sweep anyone trains.
MAX_CANDIDATES = 10_000
MAX_TRIALS = 100_000  # candidates x tuned combinations x seeds: a sweep of 100,000 trainings


def check_variants(count: int, file: str) -> None:
    """Refuse more than MAX_VARIANTS variants, counted before any is resolved."""
    if count > MAX_VARIANTS:
        raise UserError(f"{count:,} variants is too many (limit {MAX_VARIANTS:,})", file=file,
                        key="variants")


def check_work(variants: list, file: str, key: str) -> None:
    """Refuse a space whose solve would not end in seconds. `variants` are resolved ones
    (`space.Resolved`), read for their bounds only: nothing is expanded here."""
    raw = sum(v.raw_bound for v in variants)
    if raw > MAX_RAW:
        raise UserError(f"{_count(raw)} raw points is too many (limit {MAX_RAW:,} in all: each is "
                        "solved)", file=file, key=key)
    combos = sum(v.combo_bound for v in variants)
    if combos > MAX_COMBOS:
        raise UserError(f"{_count(combos)} combinations of text, flag and k values is too many (limit "
                        f"{MAX_COMBOS:,}: the solver takes them one at a time)", file=file, key=key)
    solves = sum(v.layer_solves for v in variants)
    if solves > MAX_LAYER_SOLVES:
        raise UserError(f"{_count(solves)} layer solves (raw points x n_layers) is too many for a "
                        f"family that solves each shape itself (limit {MAX_LAYER_SOLVES:,})",
                        file=file, key=key)


def check_trials(candidates: int, tuned: int, seeds: int, file: str | None, key: str,
                 solved: bool = True) -> None:
    """Refuse a sweep of more than MAX_TRIALS trials. Before the space is solved
    (`solved` False) its variants stand in for the candidates, one each at the least."""
    total = candidates * tuned * seeds
    if total > MAX_TRIALS:
        parts = (f"{_plural(candidates, 'candidate' if solved else 'variant')} x "
                 f"{_plural(tuned, 'tuned setting')} x {_plural(seeds, 'seed')}")
        raise UserError(f"{'' if solved else 'at least '}{total:,} trials ({parts}); the limit "
                        f"is {MAX_TRIALS:,}", file=file, key=key)


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _count(x: float) -> str:
    """A bound as a whole number (a huge one as 1.2e+18)."""
    return f"{x:,.0f}" if x < 1e15 else f"{x:.3g}"
