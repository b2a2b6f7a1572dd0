"""The live dashboard: the report page served over every sweep, refreshed as trials land.

Plain `http.server` is enough: the page polls `api/version` (a fingerprint of the store's
Parquet files and of the running trials' live curves, `shapesweep.results.live`) and re-fetches `api/dashboard` when it changes; the payload is rebuilt
at most once per store version. `api/config` returns a trial's candidate YAML.
A `FragmentCache` keeps the fragments already read, so a request reads only the
fragments that landed since the last one. Requests must name this server in `Host`
(a DNS-rebinding guard); a store that cannot be read answers 500 with one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pyarrow.fs as pafs
from shapesweep.results.live import LIVE_FOLDER
from shapesweep.results.store import DamagedStore, FragmentCache

from shapesweep.common import UserError


class DashboardState:
    """What the handlers share: the store root and the payload of the last store version."""

    def __init__(self, root: str, poll_s: float = 3.0):
        self.root, self.poll_s = str(root), poll_s
        self.cache = FragmentCache()
        self.hosts: set[str] = set()  # the `Host` values naming this server (make_server sets them)
        self._lock = threading.Lock()
        self._cached: tuple[str, str] | None = None
        self._plotly_js: bytes | None = None

    def version(self) -> str:
        """A hash of every Parquet and live-curve file's path, size and mtime under the root."""
        if "://" in self.root:
            fs, base = pafs.FileSystem.from_uri(self.root)
        else:
            fs, base = pafs.LocalFileSystem(), os.path.abspath(self.root)
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        digest = hashlib.sha256()
        for info in sorted(infos, key=lambda i: i.path):
            if info.path.endswith(".parquet") or (info.path.endswith(".jsonl")
                                                   and posixpath.basename(posixpath.dirname(info.path)) == LIVE_FOLDER):
                digest.update(f"{info.path}|{info.size}|{info.mtime_ns}\n".encode())
        return digest.hexdigest()[:16]

    def payload(self) -> str:
        from shapesweep.dashboards.report import build_payload

        with self._lock:  # one rebuild per version, however many browsers poll
            version = self.version()
            if self._cached is None or self._cached[0] != version:
                self._cached = (version, build_payload(self.root, None, title="shapesweep live dashboard",
                                                       version=version, cache=self.cache))
            return self._cached[1]

    def plotly_js(self) -> bytes:
        if self._plotly_js is None:
            import plotly.offline

            self._plotly_js = plotly.offline.get_plotlyjs().encode()
        return self._plotly_js

    def config_yaml(self, sweep: str, trial_id: str) -> str:
        """The trial's candidate document (what `shapesweep train` reads) plus provenance."""
        import yaml
        from shapesweep.results.store import load_trials

        trials = load_trials(self.root, [sweep], cache=self.cache)  # UserError for an invalid name
        match = trials[trials["trial_id"] == trial_id]
        if match.empty or not isinstance(match["config_json"].iloc[0], str):
            raise UserError(f"sweep {sweep!r} has no trial {trial_id!r} with a configuration", key="trial_id")
        row = match.iloc[0]
        doc = json.loads(row["config_json"])
        doc["provenance"] = {"sweep": sweep, "trial_id": trial_id, "seed": int(row["seed"])}
        return yaml.safe_dump(doc, sort_keys=False)


class Handler(BaseHTTPRequestHandler):
    state: DashboardState  # set on the subclass make_server builds

    def log_message(self, format, *args):  # noqa: A002 - quiet: the terminal is the user's
        pass

    def _send(self, body: bytes | str, content_type: str, status: int = 200, headers: dict | None = None):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server's naming
        host = self.headers.get("Host", "")
        if host.lower() not in self.state.hosts:  # a page of another site, reached by DNS rebinding
            self._send(f"this server answers to {', '.join(sorted(self.state.hosts))}, "
                       f"not to host {host!r}\n", "text/plain; charset=utf-8",
                       HTTPStatus.MISDIRECTED_REQUEST)
            return
        try:
            self._answer()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away
        except DamagedStore as error:
            self._fail(str(error))
        except UserError as error:  # plain text, so a hostile name is never markup
            self._send(f"{error}\n", "text/plain; charset=utf-8", HTTPStatus.NOT_FOUND)
        except Exception as error:  # noqa: BLE001 - a damaged store or catalog: answer, never drop
            lines = str(error).strip().splitlines()
            self._fail(f"{type(error).__name__}: {lines[0] if lines else ''}")

    def _fail(self, line: str) -> None:
        """HTTP 500 with the one line, which the terminal running the server shows too."""
        print(f"shapesweep serve: {self.path}: {line}", file=sys.stderr, flush=True)
        self._send(f"{line}\n", "text/plain; charset=utf-8", HTTPStatus.INTERNAL_SERVER_ERROR)

    def _answer(self) -> None:
        from shapesweep.dashboards.page import render_page

        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/":
            self._send(render_page(poll_ms=int(self.state.poll_s * 1000)), "text/html; charset=utf-8")
        elif url.path == "/plotly.min.js":
            self._send(self.state.plotly_js(), "text/javascript; charset=utf-8",
                       headers={"Cache-Control": "max-age=86400"})
        elif url.path == "/api/version":
            self._send(json.dumps({"version": self.state.version()}), "application/json")
        elif url.path == "/api/dashboard":
            self._send(self.state.payload(), "application/json")
        elif url.path == "/api/config":
            sweep, trial_id = query.get("sweep", ""), query.get("trial_id", "")
            name = f"{sweep}-{trial_id}".replace("/", "_") + ".yaml"
            self._send(self.state.config_yaml(sweep, trial_id), "application/x-yaml; charset=utf-8",
                       headers={"Content-Disposition": f'attachment; filename="{_header_safe(name)}"'})
        else:
            self._send(f"not found: {url.path}\n", "text/plain; charset=utf-8", HTTPStatus.NOT_FOUND)


def _header_safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def _host_names(host: str, port: int) -> set[str]:
    """What a browser sends as `Host` for this server: loopback names and the bound host."""
    names = {"127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host}
    return {f"{name.lower()}:{port}" for name in names} | (names if port == 80 else set())


def make_server(root: str, host: str = "127.0.0.1", port: int = 8050, poll_s: float = 3.0) -> ThreadingHTTPServer:
    """A ready-to-serve HTTP server (port 0 picks a free port; see `server.server_address`)."""
    state = DashboardState(root, poll_s)
    handler = type("DashboardHandler", (Handler,), {"state": state})
    server_class = type("DashboardServer", (ThreadingHTTPServer,), {"request_queue_size": 128})
    server = server_class((host, port), handler)  # a burst of browsers queues, not refused
    server.daemon_threads = True
    state.hosts = _host_names(host, server.server_address[1])
    return server
