"""Why a candidate has no verdict, and what to run for one: the words `status` and the
report print beside `shapesweep.results.stats.compare`'s `no_verdict` codes."""

from __future__ import annotations

from typing import TypedDict

from shapesweep.common import DEFAULT_ROOT, human
from shapesweep.results.roles import SPACE_FILE
from shapesweep.results.store import sweep_dir


class CompareRow(TypedDict, total=False):
    """What these words read of a `compare` row (shapesweep.results.verdicts: its columns, as
    a dict) or of `status`'s candidate record built from one."""

    no_verdict: str | None  # why it has no verdict: a code (`why_no_verdict`), None with one
    stopped_tokens: float | None  # where ASHA stopped it
    error: str | None  # `Type: message` of a failed trial
    seeds: list[int] | None  # the measure seeds it has
    missing_seeds: list[int] | None
    failed_seeds: list[int] | None
    n_paired: float | None  # seeds paired with the baseline
    state: str | None  # measured, pending, ...


def _seeds(seeds: list[int]) -> str:
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def _command(verb: str, root: str, *rest: str) -> str:
    where = [] if root == DEFAULT_ROOT else ["--root", root]
    return " ".join(["shapesweep", verb, *rest, *where])


def rerun_command(sweep: str, root: str, *options: str) -> str:
    """`run` of the sweep's own space (kept in its folder) with `options`."""
    return _command("run", root, f"{sweep_dir(root, sweep)}/{SPACE_FILE}", *options)


def why_no_verdict(candidate: CompareRow, sweep: str, root: str,
                   baseline: CompareRow | None = None) -> tuple[str, str] | None:
    """(why, what to run) for a `compare` row (a dict) without a verdict; None with one.
    `baseline`: its baseline's row, which says why when the baseline has no result."""
    code = candidate.get("no_verdict")
    if code is None:
        return None
    if code == "stopped":
        tokens = candidate.get("stopped_tokens")
        at = f" at {human(tokens)} tokens" if tokens else ""
        return (f"stopped by ASHA{at}: no mean from the seeds that survived",
                rerun_command(sweep, root, "--scheduler", "fifo", "--name", f"{sweep}-fifo"))
    if code == "failed":
        error = candidate.get("error") or "see its trials"
        return f"failed: {error}", _command("resume", root, sweep, "--retry-failed")
    if code == "choosing":
        return "its choice trials have not all ended", _command("resume", root, sweep)
    if code == "pending":
        return "its trials have not run", _command("resume", root, sweep)
    if code == "n<2":
        seeds, missing = candidate.get("seeds") or [], candidate.get("missing_seeds") or []
        failed = candidate.get("failed_seeds") or []
        paired = int(candidate.get("n_paired") or 0)
        why = f"{paired} seed{'' if paired == 1 else 's'} paired with the baseline: no interval"
        if failed:
            return (f"{why} ({_seeds(failed)} failed: {candidate.get('error') or 'see its trials'})",
                    _command("resume", root, sweep, "--retry-failed"))
        if missing:
            return f"{why} ({_seeds(missing)} not run)", _command("resume", root, sweep)
        top = max(seeds, default=-1)
        wanted = [*seeds, *range(top + 1, top + 1 + max(1, 3 - len(seeds)))]
        return (f"{why}: add seeds",
                rerun_command(sweep, root, "--name", sweep, "--seeds", ",".join(map(str, wanted))))
    if code == "no baseline":
        return ("no candidate of the baseline variant in its parameter budget",
                _command("status", root, sweep, "--baseline", "VARIANT"))
    if code == "baseline":
        if baseline is None or baseline.get("no_verdict") is None:
            return "its baseline has no result", _command("resume", root, sweep)
        why, run = why_no_verdict(baseline, sweep, root) or ("no result", "")
        return f"its baseline has no result ({why})", run
    return code, ""


def missing_seeds(candidate: CompareRow, sweep: str, root: str) -> tuple[str, str] | None:
    """(what is missing, what to run) for a candidate with a result but not every measure
    seed (its mean and verdict use the seeds it has); None when it has them all."""
    missing = candidate.get("missing_seeds") or []
    if candidate.get("state") != "measured" or not missing:
        return None
    failed = [s for s in missing if s in (candidate.get("failed_seeds") or [])]
    parts = [f"{_seeds(failed)} failed ({candidate.get('error') or 'see its trials'})"] if failed else []
    parts += [f"{_seeds([s for s in missing if s not in failed])} not run"] if len(failed) < len(missing) else []
    have = len(candidate.get("seeds") or [])
    return (f"{'; '.join(parts)}: its mean and verdict use the {have} it has",
            _command("resume", root, sweep, *(["--retry-failed"] if failed else [])))

