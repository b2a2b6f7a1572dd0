"""A throwaway PostgreSQL server on loopback, for tests that need the real thing.

Debian's `postgresql` package puts the server in /usr/lib/postgresql/NN/bin (not on
PATH), and the server refuses to run as root, so as root it runs as the `postgres`
system user, in a temp folder that user owns. It listens on 127.0.0.1 only, on a free
port, with its unix socket in that folder, and password (scram) auth over TCP so the
URL the sweep gets is the kind a real cluster uses.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "shapesweep"
START_TRIES = 3  # a free port can be taken between finding it and the server binding it


def find_bin_dir() -> Path | None:
    """The newest /usr/lib/postgresql/NN/bin with initdb, else the folder of initdb on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if
                   Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).resolve().parent if on_path else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class PostgresServer:
    """A running server; `stop()` shuts it down and deletes its folder."""

    bin_dir: Path
    folder: Path
    port: int
    password: str
    as_postgres: bool

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    def url(self, database: str = "postgres") -> str:
        return (f"postgresql+psycopg2://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/"
                f"{database}")

    def create_database(self, name: str) -> str:
        """Create `name` and return its SQLAlchemy URL."""
        import psycopg2
        from psycopg2 import sql

        connection = psycopg2.connect(host="127.0.0.1", port=self.port, user=SUPERUSER,
                                      password=self.password, dbname="postgres")
        try:
            connection.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with connection.cursor() as cursor:
                cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        finally:
            connection.close()
        return self.url(name)

    def log_tail(self, chars: int = 2000) -> str:
        log = self.folder / "server.log"
        return log.read_text(errors="replace")[-chars:] if log.is_file() else "(no server log)"

    def pg(self, tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run one of the server's tools, as `postgres` when we are root."""
        command = [str(self.bin_dir / tool), *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, cwd=self.folder, capture_output=True, text=True,
                              timeout=timeout)

    def stop(self) -> None:
        try:
            if (self.data_dir / "postmaster.pid").exists():
                self.pg("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop", timeout=60)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def start_server(bin_dir: Path | None = None) -> PostgresServer:
    """initdb + pg_ctl start in a fresh temp folder; raises RuntimeError with the log on failure."""
    bin_dir = bin_dir or find_bin_dir()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (no initdb found)")
    as_postgres = os.geteuid() == 0
    folder = Path(tempfile.mkdtemp(prefix="shapesweep-pg-"))
    server = PostgresServer(bin_dir, folder, 0, secrets.token_hex(16), as_postgres)
    try:
        password_file = folder / "password"
        password_file.write_text(server.password + "\n")
        if as_postgres:
            user = pwd.getpwnam("postgres")
            for path in (folder, password_file):
                os.chown(path, user.pw_uid, user.pw_gid)
        done = server.pg("initdb", "-D", str(server.data_dir), "-U", SUPERUSER,
                         f"--pwfile={password_file}", "--auth-local=trust",
                         "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C",
                         "--no-sync")
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-2000:]}")
        password_file.unlink()
        for _ in range(START_TRIES):
            server.port = _free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {server.port} -k {folder} "
                       "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            done = server.pg("pg_ctl", "-D", str(server.data_dir), "-l",
                             str(folder / "server.log"), "-o", options, "-w", "-t", "60", "start")
            if done.returncode == 0:
                return server
        raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()}\n{server.log_tail()}")
    except BaseException:
        server.stop()
        raise
