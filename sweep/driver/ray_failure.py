"""A Ray that would not start (or that a driver could not join), said in one line: what
failed, the log file that says why, and what to run next. Ray's own exception is a
multi-line traceback from deep inside `ray.init`; a user needs none of it."""

from __future__ import annotations

import os
from pathlib import Path

from shapesweep.common import UserError

START_WAIT_ENV = "RAY_gcs_server_port_wait_time_s"  # Ray's own wait for its GCS (and a join's)
DEFAULT_START_WAIT_S = 30  # Ray 2.60's default for START_WAIT_ENV
# Ray's logs that say why a local start failed, the likeliest first
START_LOGS = ("gcs_server.err", "raylet.err", "gcs_server.out", "raylet.out")


class RayStartFailed(UserError):
    """Ray did not start or could not be joined, after its retry."""


def retry_wait_s() -> int:
    """The longer wait the one retry gets: twice the first's (START_WAIT_ENV, else Ray's
    default)."""
    try:
        first = int(os.environ.get(START_WAIT_ENV, DEFAULT_START_WAIT_S))
    except ValueError:
        first = DEFAULT_START_WAIT_S
    return 2 * max(first, 1)


def start_log(session_dir: str | None) -> str | None:
    """The log file of a failed start's session that says why (the first non-empty of
    START_LOGS), else its logs folder; None where the start made no session."""
    if not session_dir:
        return None
    logs = Path(session_dir) / "logs"
    for name in START_LOGS:
        path = logs / name
        try:
            if path.stat().st_size > 0:
                return str(path)
        except OSError:
            continue
    return str(logs) if logs.is_dir() else None


def failure_line(error: BaseException, address: str, log: str | None, wait_s: int,
                 then: str | None) -> RayStartFailed:
    """The one line for a start (`address` "local") or a join that failed twice."""
    reason = (str(error).strip() or type(error).__name__).splitlines()[0]
    what = "Ray did not start" if address == "local" else f"could not join the Ray cluster at {address}"
    where = (f"Ray's log: {log}" if log else
             "Ray's logs: session_latest/logs in Ray's temp folder on the cluster's head node"
             if address != "local" else "Ray wrote no log")
    return RayStartFailed(
        f"{what}: {type(error).__name__}: {reason} (tried twice, the second time waiting "
        f"{wait_s} s; {START_WAIT_ENV} sets the first wait); {where}"
        + (f"; {then}" if then else ""),
        key=None if address == "local" else "--address")
