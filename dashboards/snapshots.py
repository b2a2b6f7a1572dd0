"""The live dashboard's payload, built once per store change in a process of its own (`builder.py`).

A payload takes seconds to build on a large store (1.3 s at 3,000 trials, with every
fragment already read) and a sweep lands trials every second or so, so no request waits
for one: a builder process checks the store's fingerprint every `refresh_s`, builds a
`Snapshot` when it changed (the JSON, its gzip, its ETag and each trial's config) and sends
it to the server, whose requests only copy the latest snapshot's bytes. The builder has
its own interpreter, so a build never holds the lock the server's request threads share.
A snapshot is at most one check interval plus one build behind the store; `/api/version`
names the store version the served payload was built from.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import shapesweep
from shapesweep.common import UserError
from shapesweep.results.parquet_store import ParquetStore


@dataclass(frozen=True)
class Snapshot:
    """One payload as the server hands it out, or the one line saying why there is none."""

    version: str  # the store fingerprint it was built from (`store_version`)
    body: bytes = b""  # the payload JSON (report.build_payload)
    gzipped: bytes = b""
    etag: str = ""  # a hash of `body`: equal ETags, equal bytes, whichever server built them
    configs: dict[tuple[str, str], tuple[str, int | None]] = field(default_factory=dict)  # (sweep, trial_id) -> (config JSON, seed)
    error: str | None = None  # a store that cannot be read: HTTP 500 with this line


FIRST_WAIT_S = 0.5  # a request before the first build waits this long, then gets WAITING
WAITING_VERSION = "building"  # no store fingerprint is this (they are hex)


def _waiting_snapshot() -> Snapshot:
    """What the server answers before the builder's first snapshot: the payload of a store
    with no sweeps yet (`report.build_payload`'s keys; a test holds them equal), titled to
    say the first view is being built."""
    coded = {"values": [], "codes": {"dtype": "u1", "bdata": ""}}
    rows: dict[str, object] = {name: coded for name in ("sweep", "family", "design", "budget", "status", "metric_name",
                                      "label", "error", "reason", "hover")}
    rows |= {"trial_id": [], "seed": [], "doc": [], "train": [], "metric": {"dtype": "f8", "bdata": ""},
             **{name: {"dtype": "f4", "bdata": ""} for name in ("val_ppl", "params_non_embedding", "training_flops")}}
    payload = {"title": "shapesweep live dashboard: reading the store (the page fills in when it is read)",
               "version": WAITING_VERSION, "sweeps": [], "families": [], "budgets": [], "metrics": [],
               "rows": rows, "docs": [], "trains": [], "comparisons": [], "shared": [], "figures": []}
    body = json.dumps(payload).encode()
    return Snapshot(WAITING_VERSION, body, gzip.compress(body, 6), '"' + hashlib.sha256(body).hexdigest()[:20] + '"')


def store_version(root: str) -> str:
    """A hash of every trials fragment's and live curve's path, size and mtime under the root.

    A trials fragment is a trial's commit record (`write_trial` writes its curves first), so
    the version moves when a trial lands whole, never between its curves and its row."""
    return ParquetStore(root).version()


def one_line(error: Exception) -> str:
    """What a request for the payload answers (HTTP 500) while the store cannot be read."""
    if isinstance(error, UserError):  # DamagedStore among them: its message is the line
        return str(error)
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


# Ctrl-C in the terminal reaches the builder too: the server handles it, the builder ignores it
# from its first line. `main` imported, so a `Snapshot` is pickled by its module's name.
BUILDER = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
           "from shapesweep.dashboards.builder import main; main()")


STORAGE_ENV = "SHAPESWEEP_BUILDER_STORAGE"  # `serve --storage`, to the builder (a password stays off `ps`)

WAITING = _waiting_snapshot()


def _pipe(stream: IO[bytes] | None) -> IO[bytes]:
    if stream is None:
        raise RuntimeError("the builder process has no pipe")
    return stream


class LiveSnapshots:
    """The server's side: starts the builder, keeps its latest snapshot, stops it on close."""

    def __init__(self, root: str, refresh_s: float = 0.5, storage: str | None = None):
        home = str(Path(shapesweep.__file__).resolve().parents[1])  # the builder imports this same code
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (home, os.environ.get("PYTHONPATH")))),
               STORAGE_ENV: storage or ""}
        self._process = subprocess.Popen([sys.executable, "-c", BUILDER, root, str(refresh_s)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.pid = self._process.pid
        # both pipes were asked for, so Popen made them
        self._from_builder, self._to_builder = _pipe(self._process.stdout), _pipe(self._process.stdin)
        self._latest: Snapshot | None = None
        self._ready = threading.Event()
        self._closing = False
        threading.Thread(target=self._receive, name="shapesweep-serve-snapshots", daemon=True).start()

    def latest(self) -> Snapshot:
        """The newest snapshot; until the builder's first one arrives (its interpreter starts,
        imports and reads the whole store: tens of seconds on a large store under load), after
        FIRST_WAIT_S the waiting one, so a first request is answered at once and the page
        renders the real one when `/api/version` moves."""
        if not self._ready.wait(FIRST_WAIT_S) or self._latest is None:
            return WAITING
        return self._latest

    def wait_built(self, timeout_s: float | None = None) -> bool:
        """Whether the builder's first snapshot (or its one line of failure) came within
        `timeout_s` (None: however long it takes)."""
        return self._ready.wait(timeout_s)

    def _receive(self) -> None:
        last_error = None
        while True:
            try:
                snapshot = pickle.load(self._from_builder)  # our own child's: trusted
            except Exception:  # noqa: BLE001 - the builder ended (or garbled its pipe): say so once
                if not self._closing:
                    self._latest = Snapshot("", error=f"the dashboard's builder process stopped "
                                                      f"(exit code {self._process.wait()})")
                    print(f"shapesweep serve: {self._latest.error}", file=sys.stderr, flush=True)
                    self._ready.set()
                return
            if snapshot.error is not None and snapshot.error != last_error:
                print(f"shapesweep serve: {snapshot.error}", file=sys.stderr, flush=True)  # once, not per request
            last_error = snapshot.error
            self._latest = snapshot
            self._ready.set()

    def close(self) -> None:
        self._closing = True
        self._process.terminate()  # it writes nothing but its pipe: stopping mid-build loses only that build
        self._process.wait(30)
        self._to_builder.close()


def config_document(snapshot: Snapshot, sweep: str, trial_id: str) -> dict:
    """A trial's candidate document (what `shapesweep train` reads) plus provenance."""
    found = snapshot.configs.get((sweep, trial_id))
    if found is None:
        raise UserError(f"sweep {sweep!r} has no trial {trial_id!r} with a configuration", key="trial_id")
    config, seed = found
    return {**json.loads(config), "provenance": {"sweep": sweep, "trial_id": trial_id, "seed": seed}}
