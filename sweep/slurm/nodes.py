"""The batch script's wait for its Ray cluster: the head's port answering, then every node of
the allocation alive in it, while the node processes it watches still run.

`python -m shapesweep.sweep.slurm.nodes HOST:PORT NODES SECONDS [PID...]`: exit 0 once they
are, else one line and exit 2."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence

import ray

from shapesweep.common import UserError
from shapesweep.sweep.driver import ray_compat
from shapesweep.sweep.slurm import step_main

POLL_S = 1.0


def wait_for_cluster(address: str, nodes: int, seconds: float, watched: Sequence[int] = ()) -> None:
    """Return once `nodes` Ray nodes are alive at `address` (HOST:PORT); UserError when
    `seconds` pass first or a process of `watched` (the script's `ray start`s) ends.

    Ray is asked in a thread of its own: `ray.init` at a head that dies while it answers
    retries for minutes, so this thread watches the clock and the processes meanwhile."""
    deadline = time.monotonic() + seconds
    signal.signal(signal.SIGTERM, _stopped)
    alive: list[int] = [0]
    ready = threading.Event()
    threading.Thread(target=_count, args=(address, nodes, alive, ready), daemon=True).start()
    while not ready.wait(POLL_S):
        _check(address, nodes, alive[0], deadline, seconds, watched)


def _count(address: str, nodes: int, alive: list[int], ready: threading.Event) -> None:
    """Join the cluster once its port answers, then count its live nodes into `alive[0]`
    until there are `nodes`."""
    host, _, port = address.rpartition(":")
    while not _answers(host, int(port)):
        time.sleep(POLL_S)
    ray_compat.use_cluster_token()
    while not _joined(address):  # a GCS too busy to answer yet: Ray's error, tried again
        time.sleep(POLL_S)
    while (count := sum(bool(node["Alive"]) for node in ray.nodes())) < nodes:
        alive[0] = count
        time.sleep(POLL_S)
    alive[0] = count
    ray.shutdown()
    ready.set()


def _stopped(signum: int, frame: object) -> None:
    """TERM (the job's end, or the script's USR1): the wait is over, with nothing to clean."""
    os._exit(128 + signum)


def _joined(address: str) -> bool:
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        return True
    except (ConnectionError, RuntimeError):
        return False


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=POLL_S):
            return True
    except OSError:
        return False


def _check(address: str, nodes: int, alive: int, deadline: float, seconds: float,
           watched: Sequence[int]) -> None:
    for pid in watched:
        if not _running(pid):
            raise UserError(f"a Ray node's `ray start` (pid {pid}) ended while {alive} of {nodes} "
                            f"nodes were up at {address}; its output is above")
    if time.monotonic() > deadline:
        raise UserError(f"only {alive} of {nodes} Ray nodes were up at {address} after "
                        f"{seconds:g} s (SHAPESWEEP_RAY_WAIT sets the wait)")


def _running(pid: int) -> bool:
    """Whether `pid` runs (a child that ended but is not yet reaped counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: a signal probe
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


USAGE = "python -m shapesweep.sweep.slurm.nodes HOST:PORT NODES SECONDS [PID...]"


def _wait(argv: list[str]) -> None:
    wait_for_cluster(argv[0], int(argv[1]), float(argv[2]), [int(pid) for pid in argv[3:]])


if __name__ == "__main__":
    code = step_main(_wait, USAGE)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # not Python's exit: it would wait on Ray's threads, maybe still retrying
