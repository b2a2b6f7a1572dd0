"""Who holds a sweep's lease, and when a lease counts as dead: shared by every store.

The lease is the one driver allowed to write a sweep; it renews a heartbeat, and a lease
whose heartbeat is older than `lease_timeout_s()` (or whose process on this host is gone)
is dead: `status` shows such a sweep as not running, and the next driver takes it over.
This module imports no database driver, so an in-memory store uses it as the catalog does.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shapesweep.common import pid_alive
from shapesweep.results.deadlines import seconds_from_env

LEASE_TIMEOUT_ENV = "SHAPESWEEP_LEASE_TIMEOUT_S"
DEFAULT_LEASE_TIMEOUT_S = 60.0  # a lease whose heartbeat is older than this is dead


def utc_now() -> datetime:
    return datetime.now(UTC)


def _utc(stamp: datetime) -> datetime:
    """SQLite drops the zone; we store UTC."""
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # what an unreadable time stands for: long ago


def read_stamp(value: object) -> datetime | None:
    """A time as the database gave it (a datetime; SQLite: its text), or None when it is
    not one (a row edited by hand, a damaged file)."""
    if isinstance(value, datetime):
        return _utc(value)
    try:
        return _utc(datetime.fromisoformat(str(value)))
    except ValueError:
        return None


_warned: set[str] = set()


def warn_once(line: str) -> None:
    """One warning line on stderr per damaged row and process."""
    if line not in _warned:
        _warned.add(line)
        print(f"warning: {line}", file=sys.stderr, flush=True)


def lease_timeout_s() -> float:
    """How old a lease's heartbeat may get before its driver counts as gone (inf: never)."""
    return seconds_from_env(LEASE_TIMEOUT_ENV, DEFAULT_LEASE_TIMEOUT_S, infinite_ok=True)


@dataclass(frozen=True)
class LeaseRecord:
    """Who holds a sweep's lease, detached from the database session."""

    name: str
    host: str
    pid: int
    token: str
    since: datetime
    heartbeat_at: datetime

    @classmethod
    def _from_row(cls, row, where: str) -> LeaseRecord:
        """From a raw row (`_raw`); an unreadable time is long ago: a dead lease, taken over."""
        stamps: dict[str, datetime] = {}
        for name in ("since", "heartbeat_at"):
            stamp = read_stamp(row[name])
            if stamp is None:
                warn_once(f"{where}: lease of sweep {row['name']!r}: {name} {row[name]!r} is not a time "
                      "(counted as a dead lease: the next run takes it over)")
                stamp = EPOCH
            stamps[name] = stamp
        return cls(row["name"], row["host"], row["pid"], row["token"], **stamps)

    def alive(self) -> bool:
        """A recent heartbeat, and (on this host, where we can look) a living process."""
        if utc_now() - self.heartbeat_at > timedelta(seconds=lease_timeout_s()):
            return False
        return self.host != socket.gethostname() or pid_alive(self.pid)

    def describe(self) -> str:
        ago = (utc_now() - self.heartbeat_at).total_seconds()
        return (f"host {self.host}, pid {self.pid}, since {self.since:%Y-%m-%d %H:%M:%S} UTC, "
                f"last heartbeat {ago:.0f} s ago")
