"""The sweep catalog: which sweeps exist, from which space, in what state.

It lives in the same SQLAlchemy database as the Optuna storage (a SQLite file in the
store root by default, PostgreSQL on a cluster), so its tables are prefixed
`shapesweep_` to keep clear of Optuna's tables: the sweeps, and the lease each running
driver holds on its sweep (`shapesweep.sweep.driver.lease`). A sweep marked `running` whose driver no
longer holds a live lease (it was killed) is reported as `interrupted`.

Every database problem (a file that is not a database, a lock held past the busy
timeout, a server that refuses, or accepts and never answers) leaves the catalog as one
`UserError` naming the database; each request waits at most `db_timeout_s()`, in a wait
Ctrl-C and SIGTERM end (`shapesweep.results.deadlines`).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from sqlalchemy import (
    DateTime,
    Integer,
    String,
    Text,
    create_engine,
    delete,
    inspect,
    select,
    type_coerce,
    update,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from shapesweep.common import UserError
from shapesweep.results.deadlines import (
    DB_TIMEOUT_ENV,
    answered,
    connect_args,
    db_timeout_s,
    one_per_thread,
)
from shapesweep.results.layout import SWEEP_NAME, validate_sweep_name
from shapesweep.results.lease_record import (  # the lease's names, importable from here as before
    DEFAULT_LEASE_TIMEOUT_S,  # noqa: F401
    EPOCH,
    LEASE_TIMEOUT_ENV,  # noqa: F401
    LeaseRecord,
    lease_timeout_s,  # noqa: F401
    read_stamp,
    utc_now,
    warn_once,
)

SWEEP_STATUSES = ("created", "running", "finished", "interrupted", "failed")
SQLITE_BUSY_TIMEOUT_S = 5  # wait this long for another process's write lock, then say so


def default_catalog_url(root: str | os.PathLike) -> str:
    """`sqlite:///ROOT/shapesweep.db` for a local (or file://) root; other roots need a URL."""
    root = os.fspath(root)
    if root.startswith("file://"):
        root = root[len("file://"):]
    elif "://" in root:
        raise UserError(
            f"results root {root!r} is not a local folder, so there is no default catalog "
            "database: pass a SQLAlchemy URL with --storage (e.g. postgresql://...)",
            key="--storage",
        )
    os.makedirs(root, exist_ok=True)
    return f"sqlite:///{os.path.join(os.path.abspath(root), 'shapesweep.db')}"


T = TypeVar("T")


def _where_name(name: object) -> str:
    """`WHERE name = '...'` for a repair line, or, for a name a terminal must not be sent
    (control characters), a SQLite condition on its bytes (`hex`)."""
    text = str(name)
    if text.isprintable():
        return "WHERE name = '" + text.replace("'", "''") + "'"
    return f"WHERE hex(name) = '{text.encode('utf-8', 'surrogatepass').hex().upper()}'"


def _raw(model) -> list:
    """The columns of `model` to select, its times as text: a time that is not one (a row
    edited by hand) would otherwise fail the whole query, for every row."""
    return [type_coerce(column, String) if isinstance(column.type, DateTime) else column
            for column in model.__table__.columns]


class _Base(DeclarativeBase):
    pass


class _SweepRow(_Base):
    __tablename__ = "shapesweep_sweeps"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    space_name: Mapped[str] = mapped_column(String(200))
    space_yaml: Mapped[str] = mapped_column(Text)
    space_hash: Mapped[str] = mapped_column(String(128))
    n_candidates: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), default="created")
    # Trial counts are the results store's (`status` counts them there). These columns stay
    # only so catalogs made when the driver wrote them (NOT NULL) still take new sweeps.
    completed: Mapped[int] = mapped_column(Integer, default=0)
    stopped_early: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)


class _LeaseRow(_Base):
    """The driver running a sweep: at most one row per sweep (the primary key)."""

    __tablename__ = "shapesweep_leases"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    token: Mapped[str] = mapped_column(String(64))
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


@dataclass(frozen=True)
class SweepRecord:
    """A catalog row, detached from the database session."""

    name: str
    space_name: str
    space_yaml: str
    space_hash: str
    n_candidates: int
    status: str
    created_at: datetime | None  # None: the row's time is not one (edited by hand, damaged)
    updated_at: datetime | None

    @classmethod
    def _from_row(cls, row, where: str) -> SweepRecord:
        """From a raw row (`_raw`): an unreadable time is None, with one warning line."""
        values = {name: row[name] for name in cls.__dataclass_fields__}
        for name in ("created_at", "updated_at"):
            values[name] = read_stamp(row[name])
            if values[name] is None:
                warn_once(f"{where}: sweep {row['name']!r}: {name} {row[name]!r} is not a time "
                      f"(shown as unknown; to repair: UPDATE {_SweepRow.__tablename__} SET {name} = "
                      f"CURRENT_TIMESTAMP {_where_name(row['name'])})")
        return cls(**values)


def without_password(url: str | None) -> str | None:
    """A storage URL safe to write to disk (sweep.json, Ray's pickles): its password is
    taken from the environment where it is used (PGPASSWORD, ~/.pgpass), as libpq does."""
    if not url:
        return url
    parsed = make_url(url)
    if parsed.password is None:
        return url
    bare = URL.create(parsed.drivername, parsed.username, None, parsed.host, parsed.port,
                      parsed.database, parsed.query)  # URL.set(password=None) keeps it
    return bare.render_as_string(hide_password=False)


def shown_database(url: str) -> str:
    """The database as a user would name it: a SQLite file's path, else the URL sans password."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        return parsed.database
    return parsed.render_as_string(hide_password=True)


class Catalog:
    """Sweeps by name, over any SQLAlchemy URL (the Optuna storage's database)."""

    def __init__(self, url: str):
        self.url = url
        self.timeout = db_timeout_s()
        sqlite = url.startswith("sqlite")
        with self._errors():
            database = make_url(url).database
            # SQLite: wait a little for another writer, then fail with "database is locked".
            self.engine = create_engine(url, connect_args=connect_args(
                url, self.timeout, sqlite_busy_s=SQLITE_BUSY_TIMEOUT_S))
        self._inline = one_per_thread(url)
        if sqlite and not self._inline:
            os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
        self._ask(self._create_tables)  # the first request: a server that never answers ends here

    def _create_tables(self) -> None:
        try:
            _Base.metadata.create_all(self.engine)
        except (OperationalError, ProgrammingError) as error:  # another process created
            if "locked" in str(error) or not self._has_tables():  # them meanwhile?
                raise

    def _ask(self, request: Callable[[], T]) -> T:
        """`request()`, any failure of it one line, and at most `self.timeout` waited for it."""
        with self._errors():
            if self._inline:
                return request()
            return answered(request, shown_database(self.url), self.timeout)

    def _has_tables(self) -> bool:
        tables = set(inspect(self.engine).get_table_names())
        return {_SweepRow.__tablename__, _LeaseRow.__tablename__} <= tables

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Any database failure -> one line naming the database and the problem."""
        try:
            yield
        except SQLAlchemyError as error:
            problem = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
            if "locked" in problem:
                problem += (f" (another process held it for over {SQLITE_BUSY_TIMEOUT_S} s; "
                            "try again when it is done)")
            elif "timeout" in problem or "timed out" in problem:  # the driver's own timeout
                problem += f" (after {self.timeout:g} s; to wait longer, set {DB_TIMEOUT_ENV})"
            raise UserError(f"cannot use the catalog database: {problem}",
                            file=shown_database(self.url)) from None

    def register(self, name: str, space_name: str, space_yaml: str, space_hash: str,
                 n_candidates: int, hash_now: Callable[[str], str] | None = None) -> SweepRecord:
        """Add a sweep, or return it if it exists with the same space; a different space is
        refused. `hash_now` hashes a saved space's text as this version parses it: a sweep
        registered by an older version, whose hash lacked a key added since with its default,
        is the same space when its saved text hashes to `space_hash` today."""
        existing = self.get(validate_sweep_name(name))
        if existing is None:
            def add() -> None:
                try:
                    with Session(self.engine) as session, session.begin():
                        session.add(_SweepRow(name=name, space_name=space_name,
                                              space_yaml=space_yaml, space_hash=space_hash,
                                              n_candidates=n_candidates))
                except IntegrityError:  # another process registered it first
                    pass
            self._ask(add)
            existing = self.get(name)
        if existing.space_hash != space_hash and not (
                hash_now is not None and _hashes_to(hash_now, existing.space_yaml, space_hash)):
            raise UserError(
                f"sweep {name!r} already exists with a different search space "
                f"({existing.space_name}, hash {existing.space_hash[:12]}; this one is "
                f"{space_name}, hash {space_hash[:12]}): choose another --name for this space, or "
                f"finish the existing sweep with `shapesweep resume {name}`", key="name",
            )
        return existing

    def get(self, name: str) -> SweepRecord | None:
        def read() -> SweepRecord | None:
            with Session(self.engine) as session:
                row = self._sweep_rows(session, _SweepRow.name == name)
                return self._reported(session, row[0]) if row else None
        return self._ask(read)

    def list(self) -> list[SweepRecord]:
        """Every sweep, oldest first (a row whose time is unreadable, first); a row whose
        name no sweep can have is left out with one warning line, never failing the rest."""
        def read() -> list[SweepRecord]:
            with Session(self.engine) as session:
                return [self._reported(session, r) for r in self._sweep_rows(session)]
        return sorted(self._ask(read), key=lambda r: (r.created_at or EPOCH, r.name))

    def _sweep_rows(self, session: Session, *where) -> list[SweepRecord]:
        rows = session.execute(select(*_raw(_SweepRow)).where(*where)).mappings()
        records = []
        for row in rows:
            if not isinstance(row["name"], str) or not SWEEP_NAME.fullmatch(row["name"]):
                warn_once(f"{shown_database(self.url)}: a sweep row named {row['name']!r}, which no sweep can "
                      f"be, is left out (to repair: DELETE FROM {_SweepRow.__tablename__} "
                      f"{_where_name(row['name'])})")
                continue
            records.append(SweepRecord._from_row(row, shown_database(self.url)))
        return records

    def _reported(self, session: Session, record: SweepRecord) -> SweepRecord:
        """`running` only while its driver holds a live lease; else it was `interrupted`."""
        if record.status != "running":
            return record
        lease = self._lease(session, record.name)
        if lease is not None and lease.alive():
            return record
        return dataclasses.replace(record, status="interrupted")

    def _lease(self, session: Session, name: str) -> LeaseRecord | None:
        row = session.execute(select(*_raw(_LeaseRow)).where(_LeaseRow.name == name)).mappings().first()
        return LeaseRecord._from_row(row, shown_database(self.url)) if row else None

    def _update(self, name: str, **values) -> SweepRecord:
        """Set columns of a sweep's row (by statement: a row whose time is unreadable takes
        updates too); returns the row as it is now."""
        def write() -> SweepRecord:
            with Session(self.engine) as session, session.begin():
                changed = session.execute(update(_SweepRow).where(_SweepRow.name == name)
                                          .values(**values, updated_at=utc_now())).rowcount
                if changed != 1:
                    raise UserError(f"no sweep named {name!r} in the catalog {self.url}", key="name")
                return self._sweep_rows(session, _SweepRow.name == name)[0]
        return self._ask(write)

    def set_planned(self, name: str, n_trials: int) -> SweepRecord:
        """The trials the sweep plans now (`n_candidates`): an adaptive sweep's grow by round."""
        return self._update(name, n_candidates=n_trials)

    def set_status(self, name: str, status: str) -> SweepRecord:
        if status not in SWEEP_STATUSES:
            raise ValueError(f"sweep status {status!r} is not one of {', '.join(SWEEP_STATUSES)}")
        return self._update(name, status=status)

    # The driver's lease (see shapesweep.sweep.driver.lease): taken atomically, so two drivers never both hold it.

    def take_lease(self, name: str, token: str) -> LeaseRecord | None:
        """Take the sweep's lease for this process; returns None when taken, else the live
        holder. A dead holder's lease is taken over by an UPDATE naming its token, so of two
        drivers racing for it exactly one succeeds."""
        mine = {"host": socket.gethostname(), "pid": os.getpid(), "token": token}
        for _ in range(5):  # each round loses only to a driver that won meanwhile
            taken, holder = self._ask(lambda: self._take_round(name, mine))
            if taken or (holder is not None and holder.alive()):
                return None if taken else holder
        return self.lease(name)

    def _take_round(self, name: str, mine: dict[str, object]) -> tuple[bool, LeaseRecord | None]:
        """One try at the lease: (taken, the holder read when it was not)."""
        now = utc_now()
        try:
            with Session(self.engine) as session, session.begin():
                session.add(_LeaseRow(name=name, since=now, heartbeat_at=now, **mine))
            return True, None
        except IntegrityError:
            pass
        with Session(self.engine) as session:
            holder = self._lease(session, name)
        if holder is None or holder.alive():
            return False, holder  # released meanwhile (insert again), or held
        with Session(self.engine) as session, session.begin():
            taken = session.execute(
                update(_LeaseRow)
                .where(_LeaseRow.name == name, _LeaseRow.token == holder.token)
                .values(since=now, heartbeat_at=now, **mine)).rowcount
        return taken == 1, None

    def lease(self, name: str) -> LeaseRecord | None:
        def read() -> LeaseRecord | None:
            with Session(self.engine) as session:
                return self._lease(session, name)
        return self._ask(read)

    def renew_lease(self, name: str, token: str) -> bool:
        """Heartbeat; False when the lease is no longer ours (it was taken over)."""
        def write() -> bool:
            with Session(self.engine) as session, session.begin():
                return session.execute(
                    update(_LeaseRow).where(_LeaseRow.name == name, _LeaseRow.token == token)
                    .values(heartbeat_at=utc_now())).rowcount == 1
        return self._ask(write)

    def release_lease(self, name: str, token: str) -> None:
        def write() -> None:
            with Session(self.engine) as session, session.begin():
                session.execute(delete(_LeaseRow).where(_LeaseRow.name == name,
                                                        _LeaseRow.token == token))
        self._ask(write)


def _hashes_to(hash_now: Callable[[str], str], space_yaml: str, space_hash: str) -> bool:
    """Whether a saved space's text hashes to `space_hash` today (False if it no longer parses)."""
    try:
        return hash_now(space_yaml) == space_hash
    except UserError:
        return False
