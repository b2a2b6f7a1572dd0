"""The live dashboard's builder process (`LiveSnapshots` starts it): a `Snapshot` of the
store per store version, pickled to the server. Its own module, so the server's process
imports none of what a payload is built with (pandas, plotly: `report`)."""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import select
import sys

from shapesweep.dashboards.report import build_payload, load_frames
from shapesweep.dashboards.snapshots import STORAGE_ENV, Snapshot, one_line, store_version
from shapesweep.results.store import FragmentCache


def build_snapshot(root: str, version: str, cache, storage: str | None = None) -> Snapshot:
    """The payload of every sweep under `root` (the catalog `storage` names, else the root's);
    a store that cannot be read gives its one line."""
    try:
        trials, curves = load_frames(root, None, cache)
        body = build_payload(root, None, title="shapesweep live dashboard", version=version,
                             cache=cache, frames=(trials, curves), storage=storage).encode()
    except Exception as error:  # noqa: BLE001 - a damaged store or catalog: say so, keep serving
        return Snapshot(version, error=one_line(error))
    configs = {(sweep, trial_id): (config, int(seed) if seed == seed else None)
               for sweep, trial_id, config, seed in zip(trials["sweep"], trials["trial_id"], trials["config_json"],
                                                        trials["seed"], strict=True)
               if isinstance(config, str)}
    return Snapshot(version, body, gzip.compress(body, 6), '"' + hashlib.sha256(body).hexdigest()[:20] + '"',
                    configs)


def _build_forever(root: str, refresh_s: float, out, storage: str | None = None) -> None:
    """The builder: a snapshot per store version, pickled to `out`, until the server closes
    this process's stdin (or dies, which closes it too)."""
    cache, built = FragmentCache(), None
    while True:
        try:
            version = store_version(root)
        except Exception as error:  # noqa: BLE001 - an unreadable folder: say so until it reads again
            version, snapshot = f"error: {error}", None
            if version != built:
                snapshot = Snapshot(version, error=one_line(error))
        else:
            snapshot = build_snapshot(root, version, cache, storage) if version != built else None
        if snapshot is not None:
            pickle.dump(snapshot, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
            built = version
        if select.select([sys.stdin], [], [], refresh_s)[0]:  # readable: the server's end closed
            return


def main() -> None:
    """The builder `LiveSnapshots` starts (`BUILDER ROOT REFRESH_S`)."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print cannot garble the snapshots
    try:
        _build_forever(sys.argv[1], float(sys.argv[2]), out, os.environ.get(STORAGE_ENV) or None)
    except BrokenPipeError:  # the server is gone: exit without flushing to it again
        os._exit(0)
