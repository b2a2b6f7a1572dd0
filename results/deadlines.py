"""How long any database is waited for, and a wait that Ctrl-C and SIGTERM still end.

A storage address that accepts a connection and never answers would otherwise hold a verb
for ever: libpq retries its `poll` on every signal, so Python's SIGTERM and Ctrl-C handlers
never run while it waits. So every database gets the driver's own timeouts (`connect_args`:
the connect, and on PostgreSQL each statement), and each request the catalog and the Optuna
storage make, and the first request to an object-store root, runs in a helper thread
(`answered`) that the main thread waits on for at most `db_timeout_s()`, in a wait signals
interrupt. One timeout for all of them, defined here: `SHAPESWEEP_DB_TIMEOUT_S`, default 30 s.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.engine import make_url

from shapesweep.common import UserError

DB_TIMEOUT_ENV = "SHAPESWEEP_DB_TIMEOUT_S"
DEFAULT_DB_TIMEOUT_S = 30.0
# The driver's own connect timeout is a little longer than the wait, so that the wait, which
# names the database and the timeout, is what the user reads.
DRIVER_GRACE_S = 2

T = TypeVar("T")


def seconds_from_env(env: str, default: float, *, infinite_ok: bool = False) -> float:
    """A timeout in seconds from the environment variable `env` (`default` when unset or
    empty): more than 0, and finite unless `infinite_ok` (`inf`: never). Anything else is
    one UserError naming the variable."""
    text = os.environ.get(env)
    try:
        timeout = float(text) if text else default
    except ValueError:
        raise UserError(f"{text!r} is not a number of seconds", key=env) from None
    if not (0 < timeout < math.inf or (infinite_ok and timeout == math.inf)):
        raise UserError(f"{text!r}: must be a number of seconds more than 0"
                        + (" (or inf: never)" if infinite_ok else ""), key=env)
    return timeout


def db_timeout_s() -> float:
    """How long a database may take to answer a connect or a request."""
    return seconds_from_env(DB_TIMEOUT_ENV, DEFAULT_DB_TIMEOUT_S)


def connect_args(url: str, timeout: float, sqlite_busy_s: float | None = None) -> dict[str, object]:
    """The DBAPI driver's own timeouts for `url` (SQLAlchemy's `connect_args`), so that a
    connect, and on PostgreSQL a statement, ends by itself even where no thread waits on it.
    A timeout the URL already sets (`?connect_timeout=...`) is left as the user set it.
    SQLite: `sqlite_busy_s`, how long to wait for another process's write lock (the
    default: `timeout`)."""
    parsed = make_url(url)
    backend, driver, given = parsed.get_backend_name(), parsed.get_driver_name(), parsed.query
    connect = math.ceil(timeout) + DRIVER_GRACE_S
    args: dict[str, object] = {}
    if backend == "sqlite":
        args["timeout"] = timeout if sqlite_busy_s is None else sqlite_busy_s
    elif backend == "postgresql" and driver in ("psycopg2", "psycopg"):
        args["connect_timeout"] = connect
        options = str(given.get("options", ""))
        if "statement_timeout" not in options:
            args["options"] = f"{options} -c statement_timeout={math.ceil(timeout * 1000)}".strip()
    elif backend == "postgresql" and driver == "pg8000":
        args["timeout"] = connect  # a socket timeout: every read
    elif backend in ("mysql", "mariadb") and driver in ("mysqldb", "pymysql", "mariadbconnector"):
        args.update(connect_timeout=connect, read_timeout=connect, write_timeout=connect)
    elif backend in ("mysql", "mariadb") and driver == "mysqlconnector":
        args["connection_timeout"] = connect
    return {key: value for key, value in args.items() if key not in given or key == "options"}


def one_per_thread(url: str) -> bool:
    """An in-memory SQLite database, which SQLAlchemy keeps one per thread: asked in the
    thread that uses it (it never waits on anything)."""
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def answered(call: Callable[[], T], where: str, timeout: float, what: str = "the database",
             key: str | None = None) -> T:
    """`call()`, which waits on `what` at `where` (a URL without its password), or one line
    (UserError) when it has not answered within `timeout` seconds. It runs in a daemon
    thread while this one waits, so SIGINT and SIGTERM (as KeyboardInterrupt) end the wait at
    once; a call left waiting is abandoned with its thread (the driver's own timeout ends it
    later)."""
    outcome: list[tuple[bool, object]] = []
    done = threading.Event()

    def attempt() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=attempt, name="shapesweep-db", daemon=True).start()
    if not done.wait(timeout):
        raise UserError(f"{what} did not answer within {timeout:g} s (a server that accepts "
                        f"and never replies?); to wait longer, set {DB_TIMEOUT_ENV}",
                        file=where, key=key)
    ok, value = outcome[0]
    if not ok:
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]
