"""The sweep catalog: which sweeps exist, from which space, in what state.

It lives in the same SQLAlchemy database as the Optuna storage (a SQLite file in the
store root by default, PostgreSQL on a cluster), so its one table is prefixed
`shapesweep_` to keep clear of Optuna's tables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import DateTime, Integer, String, Text, create_engine, inspect, select
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from results.store import validate_sweep_name
from search_spaces.errors import UserError

SWEEP_STATUSES = ("created", "running", "finished", "interrupted", "failed")


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


def _now() -> datetime:
    return datetime.now(UTC)


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
    completed: Mapped[int] = mapped_column(Integer, default=0)
    stopped_early: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


@dataclass(frozen=True)
class SweepRecord:
    """A catalog row, detached from the database session."""

    name: str
    space_name: str
    space_yaml: str
    space_hash: str
    n_candidates: int
    status: str
    completed: int
    stopped_early: int
    failed: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def _from_row(cls, row: _SweepRow) -> SweepRecord:
        values = {name: getattr(row, name) for name in cls.__dataclass_fields__}
        for stamp in ("created_at", "updated_at"):  # SQLite drops the zone; we store UTC
            if values[stamp].tzinfo is None:
                values[stamp] = values[stamp].replace(tzinfo=UTC)
        return cls(**values)


class Catalog:
    """Sweeps by name, over any SQLAlchemy URL (the Optuna storage's database)."""

    def __init__(self, url: str):
        self.url = url
        # SQLite: wait for writers instead of failing with "database is locked".
        connect_args = {"timeout": 30} if url.startswith("sqlite") else {}
        self.engine = create_engine(url, connect_args=connect_args)
        try:
            _Base.metadata.create_all(self.engine)
        except (OperationalError, ProgrammingError):  # another process created it meanwhile
            if not inspect(self.engine).has_table(_SweepRow.__tablename__):
                raise

    def register(self, name: str, space_name: str, space_yaml: str, space_hash: str,
                 n_candidates: int) -> SweepRecord:
        """Add a sweep, or return it if it exists with the same space; a different space is refused."""
        existing = self.get(validate_sweep_name(name))
        if existing is None:
            try:
                with Session(self.engine) as session, session.begin():
                    session.add(_SweepRow(name=name, space_name=space_name, space_yaml=space_yaml,
                                          space_hash=space_hash, n_candidates=n_candidates))
            except IntegrityError:  # another process registered it first
                pass
            existing = self.get(name)
        if existing.space_hash != space_hash:
            raise UserError(
                f"sweep {name!r} already exists with a different search space "
                f"({existing.space_name}, hash {existing.space_hash[:12]}; this one is "
                f"{space_name}, hash {space_hash[:12]}): choose another --name for this space, or "
                f"finish the existing sweep with `shapesweep resume {name}`", key="name",
            )
        return existing

    def get(self, name: str) -> SweepRecord | None:
        with Session(self.engine) as session:
            row = session.get(_SweepRow, name)
            return SweepRecord._from_row(row) if row else None

    def list(self) -> list[SweepRecord]:
        """Every sweep, oldest first."""
        with Session(self.engine) as session:
            rows = session.scalars(select(_SweepRow).order_by(_SweepRow.created_at, _SweepRow.name))
            return [SweepRecord._from_row(row) for row in rows]

    def _update(self, name: str, **values) -> SweepRecord:
        with Session(self.engine) as session, session.begin():
            row = session.get(_SweepRow, name)
            if row is None:
                raise UserError(f"no sweep named {name!r} in the catalog {self.url}", key="name")
            for column, value in values.items():
                setattr(row, column, value)
            row.updated_at = _now()
            session.flush()
            return SweepRecord._from_row(row)

    def set_status(self, name: str, status: str) -> SweepRecord:
        if status not in SWEEP_STATUSES:
            raise ValueError(f"sweep status {status!r} is not one of {', '.join(SWEEP_STATUSES)}")
        return self._update(name, status=status)

    def update_counts(self, name: str, completed: int, stopped_early: int, failed: int) -> SweepRecord:
        return self._update(name, completed=int(completed), stopped_early=int(stopped_early),
                            failed=int(failed))
