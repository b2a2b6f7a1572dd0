"""A sweep's Ray: started (or joined) and stopped, what a killed driver's Ray left cleared
on the next start, signals that stop a sweep as Ctrl-C does, and Ray's and Optuna's quiet
settings. Private Ray names stay behind `ray_compat`; this is the lifecycle around them."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from shapesweep.common import UserError, environment
from shapesweep.sweep.driver import ray_compat
from shapesweep.sweep.driver.ray_failure import (
    START_WAIT_ENV,
    failure_line,
    retry_wait_s,
    start_log,
)


def ray_storage(root: str, name: str) -> Path:
    """Where Ray Tune keeps its own files (trial logs, error.txt): in the sweep's folder when
    the root is on this machine, else in the local temp folder (results never need them)."""
    from shapesweep.results.parquet_store import ParquetStore  # pyarrow: this module is in --help's

    folder = ParquetStore(root).scratch_folder(name, "_ray")
    return Path(folder) if folder else Path(tempfile.gettempdir()) / f"shapesweep-{name}" / "_ray"


PROBE_TIMEOUT_S = 5.0  # a cluster's GCS answers a connect at once; Ray's own client waits minutes


def check_address(address: str | None) -> None:
    """Refuse a cluster address nothing answers at (a stopped cluster, a typo, a saved
    `sweep.json` of a cluster since gone) in one line, before any work: Ray's GCS client
    would retry it for minutes. `local`, `auto` and any form but HOST:PORT (or
    ray://HOST:PORT) are Ray's to resolve."""
    import socket

    if not address or address in ("local", "auto"):
        return
    where = address.removeprefix("ray://").rstrip("/")
    host, sep, port = where.rpartition(":")
    if not sep or not port.isdigit():
        return  # a form Ray reads its own way
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as error:
        reason = (f"no answer within {PROBE_TIMEOUT_S:g} s" if isinstance(error, TimeoutError)
                  else error.strerror or str(error))
        raise UserError(f"cannot reach a Ray cluster at {address} ({reason}): start it, or "
                        "give the address of one that runs", key="--address") from None


def init_ray(address: str | None, record: Path | None = None,
             then: str | None = None) -> tuple[bool, str | None]:
    """Start a Ray of this sweep's own, or join `address` (`--address`; never a cluster
    not named there or in $RAY_ADDRESS, which the CLI reads into it).

    Returns whether we started it (so we shut it down) and, for a local Ray, its session
    folder (so we remove it after: each start leaves one in Ray's temp directory). With
    `record` (the sweep's SESSION_RECORD), which local Ray this driver starts is noted there
    before it starts, so that a driver killed even during `ray.init` has what it left
    removed by the next (`clear_dead_session`). Interrupted while it starts (Ctrl-C,
    SIGTERM, SIGHUP), it stops what had started and removes its folder before re-raising.

    A start or join that fails is tried once more, Ray's start-up wait doubled (a loaded
    machine's GCS can miss the first); a second failure is one line (`RayStartFailed`:
    what failed, the log that says why, kept, and `then`, what to run next).
    """
    import ray

    if ray.is_initialized():
        return False, None
    address = address or "local"
    try:
        return True, _start(address, record, keep_logs=False)
    except _StartFailed:
        pass
    wait_s = retry_wait_s()
    try:
        with environment({START_WAIT_ENV: str(wait_s)}):
            return True, _start(address, record, keep_logs=True)
    except _StartFailed as failed:
        raise failure_line(failed.error, address, start_log(failed.session_dir), wait_s,
                           then) from None


class _StartFailed(Exception):
    """One failed `ray.init`: Ray's exception and the session folder whose logs it kept."""

    def __init__(self, error: Exception, session_dir: str | None):
        super().__init__(str(error))
        self.error, self.session_dir = error, session_dir


def _start(address: str, record: Path | None, keep_logs: bool) -> str | None:
    """One `ray.init`; the local Ray's session folder. A failure (not an interrupt) raises
    _StartFailed once what had started is stopped."""
    import ray

    kwargs: dict[str, Any] = {"include_dashboard": False} if address == "local" else {}
    local = address == "local"
    if local:
        kwargs["num_cpus"] = os.cpu_count()
        kwargs.update(ray_compat.without_prestarted_workers())
    else:
        ray_compat.use_cluster_token()
    since = time.time()
    if local and record is not None:
        _write_record(record, None)
    try:
        with ray_compat.local_ray_start(), interrupts_held():
            context = ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR,
                               configure_logging=True, **kwargs)
        # ray.init is annotated BaseContext; what it returns, a RayContext, has address_info
        session_dir = (local and context.address_info.get("session_dir")) or None  # type: ignore[attr-defined]
        if session_dir and record is not None:
            _write_record(record, session_dir)
    except Exception as error:  # noqa: BLE001 - whatever Ray raised, said in one line
        kept = None
        if local:
            kept = _abandon_start(since, record, keep_logs)
        else:
            _shut_down()
        raise _StartFailed(error, kept) from None
    except BaseException:
        if local:
            _abandon_start(since, record)
        raise
    return session_dir


def _shut_down() -> None:
    """After a failed join: whatever Ray set up in this process, gone."""
    import ray

    with contextlib.suppress(Exception):
        ray.shutdown()


SESSION_RECORD = "local-ray.json"  # in the sweep's Ray folder while its driver's local Ray runs


def _write_record(path: Path, session_dir: str | None) -> None:
    """Note which local Ray this driver starts (`session_dir` None: one starting now, in
    Ray's temp folder, named by this pid), so that if it dies unable to stop it (SIGKILL),
    the next driver of the sweep removes what it left (`clear_dead_session`)."""
    pid = os.getpid()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"session_dir": session_dir, "pid": pid, "started": _started(pid),
              "temp_dir": ray_compat.ray_temp_dir(), "since": time.time()}
    tmp = path.with_name(f".{path.name}.{pid}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _abandon_start(since: float, record: Path | None, keep_logs: bool = False) -> str | None:
    """After an interrupted or failed `ray.init`: stop what Ray had started, and remove the
    session folder this driver's start made (named by its pid, made since `since`); with
    `keep_logs`, its `logs` folder stays, for the user to read why. Returns that folder's
    session (None when there was none, or none kept)."""
    import ray

    with contextlib.suppress(Exception):
        ray.shutdown()
    kept = None
    for session_dir in _sessions_of(os.getpid(), ray_compat.ray_temp_dir(), since):
        _remove_leftover(session_dir, keep_logs)
        kept = session_dir if keep_logs else None
    if record is not None:
        record.unlink(missing_ok=True)
    return kept


def _sessions_of(pid: int, temp_dir: str | None, since: float) -> list[str]:
    """The local Ray session folders driver `pid` started in `temp_dir` since `since`
    (Ray names a head's session `session_DATE_PID`; one made earlier is another's)."""
    if not temp_dir:
        return []
    found = []
    for folder in Path(temp_dir).glob(f"session_*_{int(pid)}"):
        with contextlib.suppress(OSError):
            if not folder.is_symlink() and folder.is_dir() and folder.stat().st_mtime >= since - 1:
                found.append(str(folder))
    return found


def _remove_leftover(session_dir: str, keep_logs: bool = False) -> None:
    """A dead or abandoned local Ray: its processes still running (this user's, naming its
    folder: Ray's agents outlive their raylet for a minute) killed, its folder removed (but
    its `logs`, with `keep_logs`)."""
    for leftover in _processes_naming(session_dir):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(leftover, signal.SIGKILL)
    remove_session(session_dir, keep_logs)


def clear_dead_session(root: str, name: str) -> None:
    """Remove the local Ray a killed driver of this sweep left: its session folder (one per
    start, in Ray's temp folder) and its processes still running. Ours are known safely:
    the record names the session (or, for a driver killed during `ray.init`, Ray's temp
    folder, where its session is the one named by its pid and made since it began), the
    driver is dead (its pid gone, or another process since), and a process is one of that
    session's only if it is ours (same user) and its command line names that folder."""
    path = ray_storage(root, name) / SESSION_RECORD
    try:
        record = json.loads(path.read_text())
        session_dir, pid, started = record["session_dir"], record["pid"], record["started"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # no record (the driver stopped its Ray), or not one we can trust
    if not isinstance(pid, int):
        return
    if pid != os.getpid() and started is not None and _started(pid) == started:
        return  # that driver is alive: its Ray is not ours to touch
    if session_dir is None and isinstance(record.get("temp_dir"), str) and isinstance(
            record.get("since"), int | float):
        for found in _sessions_of(pid, record["temp_dir"], record["since"]):
            _remove_leftover(found)
    elif isinstance(session_dir, str) and Path(session_dir).name.startswith("session_"):
        _remove_leftover(session_dir)
    path.unlink(missing_ok=True)


def _started(pid: int) -> int | None:
    """When a process started (clock ticks since boot, /proc/PID/stat): with its pid, what
    tells it from a later process given the same pid. None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22, counted after the name


def _processes_naming(session_dir: str) -> list[int]:
    """Our processes (this user's) whose command line names `session_dir`."""
    found, needle = [], os.fsencode(session_dir)
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if entry.stat().st_uid == os.getuid() and needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # ended meanwhile
            continue
    return [pid for pid in found if pid != os.getpid()]


def stop_ray(session_dir: str | None, record: Path | None = None) -> None:
    """Shut down the Ray `init_ray` started, and delete its session folder if it was local.

    Its autoscaler monitor is killed first (`ray_compat.kill_autoscaler_monitor`): that was
    most of a sweep's wind-down."""
    import ray

    if session_dir:
        ray_compat.kill_autoscaler_monitor()
    ray.shutdown()
    remove_session(session_dir)
    if record is not None:
        record.unlink(missing_ok=True)


def remove_session(session_dir: str | None, keep_logs: bool = False) -> None:
    """Delete a shut-down local Ray's session folder (all but its `logs`, with `keep_logs`)
    and the `session_latest` link to it."""
    if not session_dir:
        return
    if keep_logs:
        with contextlib.suppress(OSError):
            for entry in Path(session_dir).iterdir():
                if entry.name != "logs":
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
    else:
        shutil.rmtree(session_dir, ignore_errors=True)
    latest = Path(session_dir).parent / "session_latest"
    if latest.is_symlink() and Path(os.readlink(latest)).name == Path(session_dir).name:
        latest.unlink(missing_ok=True)


def _as_interrupt(signum: int, frame: FrameType | None) -> None:
    """Handle a signal as Ctrl-C: through the SIGINT handler in force (`sigint_deferred`'s
    while a trial is being filed), else KeyboardInterrupt (even where SIGINT is ignored)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while Ray starts, then raise KeyboardInterrupt: raised
    inside `ray.init`, an interrupt can land in a fork handler, where Python prints it and
    carries on (it is lost: the sweep runs on), or halfway through starting a process. A
    second signal raises at once (a start that hangs). Only the main thread may set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        if caught:
            raise KeyboardInterrupt
        caught.append(signum)

    with _handling(STOP_SIGNALS, hold):
        yield
    if caught:
        raise KeyboardInterrupt


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (`kill`, a closed terminal) stop the sweep as Ctrl-C does: it is
    marked `interrupted` and resumable. Only the main thread may set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _handling((signal.SIGTERM, signal.SIGHUP), _as_interrupt):
        yield


@contextmanager
def _handling(signals: tuple[int, ...], handler: Callable[[int, FrameType | None], None],
              ) -> Iterator[None]:
    """`handler` for `signals` inside the context, the handlers before it restored after."""
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, before in previous.items():
            if before is not None:
                signal.signal(sig, before)


@contextmanager
def quiet() -> Iterator[None]:
    """Ray's and Optuna's settings for a sweep (`ray_compat.QUIET_ENV`, where the user set
    none), undone when it ends. Failed trials are reported once, one line each, by the
    progress display and in their row's `error`; Ray's own tracebacks stay in
    ROOT/NAME/_ray/*/error.txt."""
    import optuna

    tune_logger = logging.getLogger("ray.tune")
    tune_level, optuna_level = tune_logger.level, optuna.logging.get_verbosity()
    with ray_compat.quiet_environment():
        tune_logger.setLevel(logging.CRITICAL)
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweep's progress says enough
        try:
            yield
        finally:
            tune_logger.setLevel(tune_level)
            optuna.logging.set_verbosity(optuna_level)
