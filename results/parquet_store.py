"""The Parquet store and its SQL catalog behind the `ResultsStore` contract: what commands use.

Trials live as Parquet fragments under the root (`store`'s docstring draws the layout); the
lease, like the sweep catalog, lives in a SQLAlchemy database: `--storage` where given, else
`ROOT/shapesweep.db`. The catalog is opened on first use, so a reader of results alone never
imports SQLAlchemy or creates a database.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow.fs as pafs

from shapesweep.results import compaction, layout, readers, sweep_folders
from shapesweep.results.fragments import FragmentCache
from shapesweep.results.interface import ResultsStore, Row, TrialKeys
from shapesweep.results.lease_record import LeaseRecord
from shapesweep.results.live import LIVE_FOLDER

if TYPE_CHECKING:
    from shapesweep.results.catalog import Catalog

CATALOG_FILE = "shapesweep.db"  # the default catalog's file in a local root


class ParquetStore(ResultsStore):
    """Results under `root` (a folder, file:// or object-store URI), the lease in `storage`
    (a SQLAlchemy URL; None: the root's own SQLite file). `cache`: fragments already read,
    for a long-lived reader (the live dashboard)."""

    def __init__(self, root: str | os.PathLike, storage: str | None = None,
                 cache: FragmentCache | None = None) -> None:
        self.root = os.fspath(root)
        self.storage = storage
        self.cache = cache

    def __getstate__(self) -> dict:
        """Pickled (a Tune callback holding it into `tuner.pkl`, another process) without its
        open catalog, whose database engine does not pickle (the copy opens its own on first
        use), and with the storage URL's password left out: no credential lands on disk; a
        copy takes it from the environment (PGPASSWORD, ~/.pgpass), as `resume` does."""
        from shapesweep.results.catalog import without_password  # SQLAlchemy: 0.3 s

        state = {k: v for k, v in self.__dict__.items() if k != "catalog"}
        return state | {"storage": without_password(self.storage)}

    @property
    def location(self) -> str:
        return self.root

    def sweeps(self) -> list[str]:
        return sweep_folders.list_sweeps(self.root)

    def write_trial(self, sweep: str, trial_row: Row, curve_rows: Sequence[Row],
                    layer_rows: Sequence[Row] = ()) -> str:
        return sweep_folders.write_trial(self.root, sweep, dict(trial_row), [dict(r) for r in curve_rows],
                                         [dict(r) for r in layer_rows])

    def load_trials(self, sweeps: Sequence[str] | None = None) -> pd.DataFrame:
        return readers.load_trials(self.root, _listed(sweeps), cache=self.cache)

    def load_curves(self, sweeps: Sequence[str] | None = None) -> pd.DataFrame:
        return readers.load_curves(self.root, _listed(sweeps), cache=self.cache)

    def load_layers(self, sweeps: Sequence[str] | None = None) -> pd.DataFrame:
        return readers.load_layers(self.root, _listed(sweeps), cache=self.cache)

    def completed_keys(self, sweep: str) -> TrialKeys:
        return readers.completed_keys(self.root, sweep)

    def quarantined_trials(self, sweep: str) -> set[str]:
        return readers.quarantined_trials(self.root, sweep)

    def compact(self, sweep: str, stale_s: float | None = None) -> str | None:
        return compaction.compact(self.root, sweep, stale_s=compaction.STALE_S if stale_s is None else stale_s)

    def write_file(self, sweep: str, name: str, text: str) -> None:
        layout.write_sweep_file(self.root, sweep, name, text)

    def read_file(self, sweep: str, name: str) -> str | None:
        return layout.read_sweep_file(self.root, sweep, name)

    def read_json(self, sweep: str, name: str, kind: type,
                  check: Callable[[object], str | None] | None = None) -> object:
        """As the contract says, the repair named for each of a sweep's own files."""
        return layout.read_sweep_json(self.root, sweep, name, kind, check)

    def file_location(self, sweep: str, name: str = "") -> str:
        folder = layout.sweep_dir(self.root, sweep)
        return f"{folder}/{name}" if name else folder

    def file_repair(self, sweep: str, name: str) -> str:
        """Each of a sweep's own files has its repair (`sweep.json`: run its space again)."""
        return layout.sweep_file_repair(self.root, sweep, name)

    # ---- the lease, in the catalog's database

    @cached_property
    def catalog(self) -> Catalog:
        """The sweep catalog (and lease table) of this store, opened (created) on first use."""
        from shapesweep.results.catalog import Catalog, default_catalog_url  # SQLAlchemy: 0.3 s

        return Catalog(self.storage or default_catalog_url(self.root))

    def take_lease(self, sweep: str, token: str) -> LeaseRecord | None:
        return self.catalog.take_lease(layout.validate_sweep_name(sweep), token)

    def lease(self, sweep: str) -> LeaseRecord | None:
        return self.catalog.lease(sweep)

    def renew_lease(self, sweep: str, token: str) -> bool:
        return self.catalog.renew_lease(sweep, token)

    def release_lease(self, sweep: str, token: str) -> None:
        self.catalog.release_lease(sweep, token)

    # ---- what only this store has: a local folder, its own catalog file, a fingerprint

    def local_folder(self) -> str | None:
        """The root as a folder of this machine, or None (an object store)."""
        return layout.local_folder(self.root)

    def has_own_catalog(self) -> bool:
        """Whether the root holds its default catalog (`ROOT/shapesweep.db`): a reader opens
        no catalog where none is, and never creates one."""
        folder = self.local_folder()
        return folder is not None and os.path.isfile(os.path.join(folder, CATALOG_FILE))

    def scratch_folder(self, sweep: str, name: str) -> str | None:
        """A folder of the sweep for files that are not results (Ray's trial logs), on a
        local root; None on an object store (such files then go to the local temp folder)."""
        return self.local_path(layout.validate_sweep_name(sweep), name)

    def local_path(self, *names: str) -> str | None:
        """A path in a local root's folder for files that are not results (the demo's report
        and exported configs); None on an object store."""
        folder = self.local_folder()
        return os.path.join(folder, *names) if folder else None

    def version(self) -> str:
        """A hash of every trials fragment's and live curve's path, size and mtime: it moves
        when a trial lands whole (a trials fragment is the commit record), never between its
        curves and its row."""
        fs, base = layout.filesystem(self.root)
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        digest = hashlib.sha256()
        for info in sorted(infos, key=lambda i: i.path):
            folder = posixpath.basename(posixpath.dirname(info.path))
            if (info.path.endswith(".parquet") and folder == "trials") or (
                    info.path.endswith(".jsonl") and folder == LIVE_FOLDER):
                digest.update(f"{info.path}|{info.size}|{info.mtime_ns}\n".encode())
        return digest.hexdigest()[:16]


def _listed(sweeps: Sequence[str] | None) -> list[str] | None:
    return None if sweeps is None else list(sweeps)
