"""A storage that accepts and never answers (issue 57.1): `status` and `run` end by
themselves within `SHAPESWEEP_DB_TIMEOUT_S` in one line naming the database, exit 2, and
SIGTERM during the wait ends them within seconds with the interrupt's exit code, 130. The
database is a real socket that accepts every connection and never writes a byte; the CLI is
a real process. Times are counted from the moment the listener accepted the connection, so a
slow start of the process under load does not count against the deadline."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sweep_helpers import CHILD_ENV, write_space

from shapesweep.common import UserError
from shapesweep.results.catalog import Catalog
from shapesweep.results.deadlines import DB_TIMEOUT_ENV, connect_args, db_timeout_s

SIGNAL_MARGIN_S = 10.0  # the bound for a signal to end the command
TIMEOUT_MARGIN_S = 8.0  # past the timeout: the process's own exit, on a loaded machine


@dataclass
class SilentListener:
    """A TCP port that accepts every connection and never sends anything."""

    sock: socket.socket
    accepted: threading.Event = field(default_factory=threading.Event)
    first_at: float | None = None
    held: list[socket.socket] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            self.held.append(conn)
            if self.first_at is None:
                self.first_at = time.monotonic()
            self.accepted.set()


@pytest.fixture
def silent() -> Iterator[SilentListener]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    listener = SilentListener(sock)
    threading.Thread(target=listener.serve, daemon=True).start()
    try:
        yield listener
    finally:
        sock.close()
        for conn in listener.held:
            conn.close()


def _cli(tmp_path: Path, verb: list[str], url: str, timeout_s: float) -> subprocess.Popen:
    env = {**CHILD_ENV, DB_TIMEOUT_ENV: str(timeout_s)}
    return subprocess.Popen([sys.executable, "-m", "shapesweep.sweep.cli", *verb,
                             "--root", str(tmp_path / "root"), "--storage", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _verb(name: str, tmp_path: Path) -> list[str]:
    if name == "status":
        return ["status"]
    return ["run", str(write_space(tmp_path)), "--no-progress"]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.slow  # fast tier: a real process end to end; make test runs it
@pytest.mark.parametrize("verb", ["status", "run"])
def test_a_silent_database_ends_the_command_by_itself_within_its_timeout(tmp_path, silent, verb):
    url = f"postgresql://u:hunter2@127.0.0.1:{silent.port}/db"
    child = _cli(tmp_path, _verb(verb, tmp_path), url, timeout_s=3)
    try:
        _, err = child.communicate(timeout=120)  # startup under load, then the wait
    finally:
        child.kill()
    ended = time.monotonic()
    assert silent.first_at is not None, err  # it did reach the database
    waited = ended - silent.first_at
    assert child.returncode == 2, err
    assert 2.5 <= waited <= 3 + TIMEOUT_MARGIN_S, (waited, err)
    lines = _lines(err)
    assert len(lines) == 1, err
    assert f"127.0.0.1:{silent.port}/db" in lines[0] and "3 s" in lines[0], lines[0]
    assert DB_TIMEOUT_ENV in lines[0] and "hunter2" not in lines[0] and "***" in lines[0]


@pytest.mark.slow  # fast tier: a real process end to end; make test runs it
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_a_command_waiting_on_a_silent_database(tmp_path, silent, sig):
    child = _cli(tmp_path, ["status"], f"postgresql://u@127.0.0.1:{silent.port}/db", timeout_s=300)
    try:
        assert silent.accepted.wait(120), "the command never connected"
        time.sleep(2)  # well inside the driver's wait
        assert child.poll() is None, child.communicate()
        child.send_signal(sig)
        sent = time.monotonic()
        _, err = child.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        child.kill()
    assert child.returncode == 130, err
    assert took <= SIGNAL_MARGIN_S, took
    assert _lines(err) == ["shapesweep status: interrupted"], err


def test_a_catalog_request_is_bounded_in_process_too(silent, monkeypatch):
    """The catalog itself (what `resume`, `export` and `serve` share) ends its first request."""
    monkeypatch.setenv(DB_TIMEOUT_ENV, "1.5")
    began = time.monotonic()
    with pytest.raises(UserError, match="did not answer within 1.5 s"):
        Catalog(f"postgresql+psycopg2://u@127.0.0.1:{silent.port}/db")
    assert time.monotonic() - began < 1.5 + TIMEOUT_MARGIN_S


def test_every_driver_gets_its_own_timeouts():
    assert connect_args("sqlite:///x.db", 30) == {"timeout": 30}
    assert connect_args("sqlite:///x.db", 30, sqlite_busy_s=5) == {"timeout": 5}
    pg = connect_args("postgresql+psycopg2://u@h/db", 30)
    assert pg["connect_timeout"] > 30 and "statement_timeout=30000" in pg["options"]
    given = connect_args("postgresql+psycopg2://u@h/db?connect_timeout=9&options=-c%20search_path%3Dx", 30)
    assert "connect_timeout" not in given  # the user's stands
    assert given["options"] == "-c search_path=x -c statement_timeout=30000"
    assert connect_args("mysql+pymysql://u@h/db", 30)["read_timeout"] > 30
    assert connect_args("postgresql+pg8000://u@h/db", 30)["timeout"] > 30


@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf", "nan"])
def test_a_timeout_that_is_not_one_is_refused(monkeypatch, value):
    monkeypatch.setenv(DB_TIMEOUT_ENV, value)
    with pytest.raises(UserError, match=DB_TIMEOUT_ENV):
        db_timeout_s()


def test_the_default_timeout_is_the_documented_one(monkeypatch):
    monkeypatch.delenv(DB_TIMEOUT_ENV, raising=False)
    docs = Path(__file__).parent.parent / "docs"
    for page in ("reliability.md", "cli.md"):
        assert f"`{DB_TIMEOUT_ENV}`, default {db_timeout_s():g} s" in (docs / page).read_text(), page


def test_an_object_store_root_that_never_answers_is_one_line_in_its_timeout(silent, monkeypatch):
    from shapesweep.sweep.verbs.store_access import check_store_answers

    monkeypatch.setenv(DB_TIMEOUT_ENV, "1.5")
    root = f"s3://bucket/x?endpoint_override=127.0.0.1:{silent.port}&scheme=http&region=us-east-1"
    began = time.monotonic()
    with pytest.raises(UserError, match=r"--root: the object store did not answer within 1.5 s"):
        check_store_answers(root)
    assert silent.accepted.is_set()
    assert time.monotonic() - began < 1.5 + TIMEOUT_MARGIN_S


def test_one_reading_of_a_timeout_serves_the_database_and_the_lease(monkeypatch):
    """`seconds_from_env` reads both timeouts: a positive number of seconds; the lease's
    may be inf (never dead), the database's may not (every wait has a deadline)."""
    from shapesweep.results.deadlines import seconds_from_env
    from shapesweep.results.lease_record import LEASE_TIMEOUT_ENV, lease_timeout_s

    monkeypatch.setenv(LEASE_TIMEOUT_ENV, "inf")
    assert lease_timeout_s() == float("inf")
    monkeypatch.setenv(DB_TIMEOUT_ENV, "inf")
    with pytest.raises(UserError, match=DB_TIMEOUT_ENV):
        db_timeout_s()
    for value in ("0", "-1", "nan", "soon"):
        monkeypatch.setenv(LEASE_TIMEOUT_ENV, value)
        with pytest.raises(UserError, match=LEASE_TIMEOUT_ENV):
            lease_timeout_s()
    monkeypatch.delenv("SHAPESWEEP_TEST_TIMEOUT_S", raising=False)
    assert seconds_from_env("SHAPESWEEP_TEST_TIMEOUT_S", 7.5) == 7.5
