"""The live dashboard's payload, built once per store change in a process of its own.

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
import select
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from shapesweep.common import UserError


@dataclass(frozen=True)
class Snapshot:
    """One payload as the server hands it out, or the one line saying why there is none."""

    version: str  # the store fingerprint it was built from (`store_version`)
    body: bytes = b""  # the payload JSON (report.build_payload)
    gzipped: bytes = b""
    etag: str = ""  # a hash of `body`: equal ETags, equal bytes, whichever server built them
    configs: dict[tuple[str, str], tuple[str, int | None]] = field(default_factory=dict)  # (sweep, trial_id) -> (config JSON, seed)
    error: str | None = None  # a store that cannot be read: HTTP 500 with this line


def store_version(root: str) -> str:
    """A hash of every trials fragment's and live curve's path, size and mtime under the root.

    A trials fragment is a trial's commit record (`write_trial` writes its curves first), so
    the version moves when a trial lands whole, never between its curves and its row."""
    from shapesweep.results.parquet_store import ParquetStore

    return ParquetStore(root).version()


def build_snapshot(root: str, version: str, cache) -> Snapshot:
    """The payload of every sweep under `root`; a store that cannot be read gives its one line."""
    from shapesweep.dashboards.report import build_payload, load_frames

    try:
        trials, curves = load_frames(root, None, cache)
        body = build_payload(root, None, title="shapesweep live dashboard", version=version,
                             cache=cache, frames=(trials, curves)).encode()
    except Exception as error:  # noqa: BLE001 - a damaged store or catalog: say so, keep serving
        return Snapshot(version, error=one_line(error))
    configs = {(sweep, trial_id): (config, int(seed) if seed == seed else None)
               for sweep, trial_id, config, seed in zip(trials["sweep"], trials["trial_id"], trials["config_json"],
                                                        trials["seed"], strict=True)
               if isinstance(config, str)}
    return Snapshot(version, body, gzip.compress(body, 6), '"' + hashlib.sha256(body).hexdigest()[:20] + '"',
                    configs)


def one_line(error: Exception) -> str:
    """What a request for the payload answers (HTTP 500) while the store cannot be read."""
    if isinstance(error, UserError):  # DamagedStore among them: its message is the line
        return str(error)
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _build_forever(root: str, refresh_s: float, out) -> None:
    """The builder: a snapshot per store version, pickled to `out`, until the server closes
    this process's stdin (or dies, which closes it too)."""
    from shapesweep.results.store import FragmentCache

    cache, built = FragmentCache(), None
    while True:
        try:
            version = store_version(root)
        except Exception as error:  # noqa: BLE001 - an unreadable folder: say so until it reads again
            version, snapshot = f"error: {error}", None
            if version != built:
                snapshot = Snapshot(version, error=one_line(error))
        else:
            snapshot = build_snapshot(root, version, cache) if version != built else None
        if snapshot is not None:
            pickle.dump(snapshot, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
            built = version
        if select.select([sys.stdin], [], [], refresh_s)[0]:  # readable: the server's end closed
            return


# Ctrl-C in the terminal reaches the builder too: the server handles it, the builder ignores it
# from its first line. `main` imported, so a `Snapshot` is pickled by its module's name.
BUILDER = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
           "from shapesweep.dashboards.snapshots import main; main()")


class LiveSnapshots:
    """The server's side: starts the builder, keeps its latest snapshot, stops it on close."""

    def __init__(self, root: str, refresh_s: float = 0.5):
        import shapesweep

        home = str(Path(shapesweep.__file__).resolve().parents[1])  # the builder imports this same code
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (home, os.environ.get("PYTHONPATH"))))}
        self._process = subprocess.Popen([sys.executable, "-c", BUILDER, root, str(refresh_s)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.pid = self._process.pid
        self._latest: Snapshot | None = None
        self._ready = threading.Event()
        self._closing = False
        threading.Thread(target=self._receive, name="shapesweep-serve-snapshots", daemon=True).start()

    def latest(self) -> Snapshot:
        """The newest snapshot (the first request waits for the first build)."""
        self._ready.wait()
        return self._latest

    def _receive(self) -> None:
        last_error = None
        while True:
            try:
                snapshot = pickle.load(self._process.stdout)  # our own child's: trusted
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
        self._process.stdin.close()


def config_document(snapshot: Snapshot, sweep: str, trial_id: str) -> dict:
    """A trial's candidate document (what `shapesweep train` reads) plus provenance."""
    found = snapshot.configs.get((sweep, trial_id))
    if found is None:
        raise UserError(f"sweep {sweep!r} has no trial {trial_id!r} with a configuration", key="trial_id")
    config, seed = found
    return {**json.loads(config), "provenance": {"sweep": sweep, "trial_id": trial_id, "seed": seed}}


def main() -> None:
    """The builder `LiveSnapshots` starts (`BUILDER ROOT REFRESH_S`)."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print cannot garble the snapshots
    try:
        _build_forever(sys.argv[1], float(sys.argv[2]), out)
    except BrokenPipeError:  # the server is gone: exit without flushing to it again
        os._exit(0)
