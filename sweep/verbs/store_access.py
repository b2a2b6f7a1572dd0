"""The catalog a verb's `--root` and `--storage` name (`StoreOptions`' two, checked before the
verb ran: shapesweep.sweep.options.store_args), opened for a verb that reads or writes sweeps; a
reader never creates one."""

from __future__ import annotations

from typing import Protocol

from shapesweep.common import UserError
from shapesweep.results.catalog import Catalog, default_catalog_url
from shapesweep.results.deadlines import answered, db_timeout_s
from shapesweep.results.parquet_store import ParquetStore
from shapesweep.results.store import probe


class StoreArgs(Protocol):
    """A verb's arguments that name a results root and its catalog (`StoreOptions`' two)."""

    root: str
    storage: str | None


def catalog(args: StoreArgs) -> Catalog:
    """The catalog `--storage` names, or the root's own (an object-store root needs
    `--storage`, refused first)."""
    url = args.storage or default_catalog_url(args.root)
    check_store_answers(args.root)
    return Catalog(url)


def read_catalog(args: StoreArgs) -> Catalog | None:
    """The catalog for a reader: None where the default one does not exist yet (a reader
    never creates a folder or a database)."""
    if args.storage is None:
        check_store_answers(args.root)
        if not ParquetStore(args.root).has_own_catalog():
            return None
    return catalog(args)


def check_store_answers(root: str) -> None:
    """An object-store root whose store does not answer (no network, a refused endpoint, one
    that never replies within `db_timeout_s()`) is one line, not pyarrow's traceback from the
    first read (`store.probe`) nor a wait for ever."""
    try:
        answered(lambda: probe(root), root, db_timeout_s(), what="the object store", key="--root")
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        reason = (str(error).strip() or type(error).__name__).splitlines()[0]
        raise UserError(f"cannot open the results root {root!r}: {reason}", key="--root") from None
