"""The results root and catalog every verb that reads or writes sweeps shares: `--root` and
`--storage`, and the catalog they name (a reader never creates one)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from shapesweep.sweep.options import add_flags, option

DEFAULT_ROOT = "./sweeps"  # where sweeps go unless --root says otherwise


@dataclass
class StoreOptions:
    """Where sweeps are kept; `SweepOptions` declares these two as they are here."""

    root: str = option(DEFAULT_ROOT, "--root", help=f"results root (default {DEFAULT_ROOT})",
                       resume=True, saved=False)  # not saved: a moved root resumes
    storage: str | None = option(None, "--storage", resume=True,
                                 help="SQLAlchemy URL of the catalog + Optuna storage "
                                 "(default sqlite:///ROOT/shapesweep.db)")


def add_root(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, StoreOptions)


def catalog(args: argparse.Namespace):
    from shapesweep.results.catalog import Catalog, default_catalog_url

    return Catalog(args.storage or default_catalog_url(args.root))


def read_catalog(args: argparse.Namespace):
    """The catalog for a reader: None where the default one does not exist yet (a reader
    never creates a folder or a database)."""
    from shapesweep.results.store import local_folder

    if args.storage is None:
        folder = local_folder(args.root)
        if folder is None or not os.path.isfile(os.path.join(folder, "shapesweep.db")):
            return None
    return catalog(args)
