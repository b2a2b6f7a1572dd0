"""One driver per sweep: a lease in the catalog database, held while `run`/`resume` drives it.

Two drivers of one sweep would train every missing trial twice. So a driver takes the
sweep's lease (a row keyed by the sweep name: host, pid, a random token, since,
heartbeat) before it reads what is missing, renews it from a heartbeat thread, and
deletes it when it ends. A second driver is refused with one line naming the holder. A
lease whose heartbeat is older than `SHAPESWEEP_LEASE_TIMEOUT_S` (default 60 s), or
whose holder is a dead process on this host (a driver killed with SIGKILL), is taken
over at once (see `Catalog.take_lease`).

The lease lives in the catalog database, not in the results root: a local root keeps its
SQLite catalog there, and an object-store root (s3://...) already requires `--storage URL`,
the one database every driver of its sweeps shares; so one mechanism covers every root.
"""

from __future__ import annotations

import secrets
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from shapesweep.common import UserError
from shapesweep.results.lease_record import LeaseRecord, lease_timeout_s


class LeaseTable(Protocol):
    """Where a sweep's lease lives: a `ResultsStore` (what the driver passes), or a catalog."""

    def take_lease(self, name: str, token: str, /) -> LeaseRecord | None: ...

    def renew_lease(self, name: str, token: str, /) -> bool: ...

    def release_lease(self, name: str, token: str, /) -> None: ...


def heartbeat_interval_s() -> float:
    """A few beats per timeout, so one slow write (a busy database) does not lose the lease."""
    return min(5.0, lease_timeout_s() / 4)


@contextmanager
def sweep_lease(catalog: LeaseTable, name: str) -> Iterator[None]:
    """Hold sweep `name`'s lease for the block, or refuse (UserError) if a live driver has it."""
    token = secrets.token_hex(16)
    holder = catalog.take_lease(name, token)
    if holder is not None:
        raise UserError(f"sweep {name!r} is already being run by another driver "
                        f"({holder.describe()}); wait for it to end or stop it", key="name")
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(catalog, name, token, stop),
                            name=f"lease-{name}", daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        try:
            catalog.release_lease(name, token)
        except UserError as error:  # it expires on its own; the sweep's outcome stands
            _warn(f"could not release the lease: {error}")


def _heartbeat(catalog: LeaseTable, name: str, token: str, stop: threading.Event) -> None:
    interval = heartbeat_interval_s()
    while not stop.wait(interval):
        try:
            if not catalog.renew_lease(name, token):
                _warn(f"sweep {name!r}: another driver took over this driver's lease "
                      "(its heartbeat was late); stop this one")
                return
        except UserError as error:  # a busy database: try again at the next beat
            _warn(f"could not renew the lease: {error}")


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)
