"""The live dashboard: the report page served over every sweep, refreshed as trials land.

The page polls `api/version` and re-fetches `api/dashboard` when it changes. Every answer is
bytes made before the request came: the payload, its gzip and ETag per store version by a
builder process (`builder.py`, `snapshots.py`), the page and plotly.js once. So a request costs a header
parse and a copy, and a hundred browsers polling while a sweep writes wait on no build.
HTTP/1.1 keeps each browser's connection open; `If-None-Match` with the current ETag gets
304. `api/config` returns a trial's candidate YAML from the same snapshot as the page.
Requests must name this server in `Host` (a DNS-rebinding guard); a store that cannot be
read answers 500 with one line; a client that hangs up early is no error.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from shapesweep.common import UserError
from shapesweep.dashboards.page import render_page
from shapesweep.dashboards.snapshots import LiveSnapshots, Snapshot, config_document

IDLE_S = 60  # a keep-alive connection idle this long is closed (its thread ends)


@dataclass(frozen=True)
class Static:
    """A response body made once: plain, gzipped, and its ETag."""

    body: bytes
    gzipped: bytes
    etag: str

    @classmethod
    def of(cls, body: bytes) -> Static:
        return cls(body, gzip.compress(body, 6), '"' + hashlib.sha256(body).hexdigest()[:20] + '"')


class DashboardState:
    """What the handlers share: the snapshots of the store, the page, plotly.js, the host names."""

    def __init__(self, root: str, poll_s: float = 3.0, refresh_s: float = 0.5,
                 storage: str | None = None):
        self.root = str(root)
        self.snapshots = LiveSnapshots(self.root, refresh_s, storage)
        self.page = Static.of(render_page(poll_ms=int(poll_s * 1000)).encode())
        self.hosts: set[str] = set()  # the `Host` values naming this server (make_server sets them)
        self._plotly_js: Static | None = None
        self._plotly_lock = threading.Lock()

    def plotly_js(self) -> Static:
        with self._plotly_lock:  # made once, by the first request (4.6 MB: a second gzip wastes a core)
            if self._plotly_js is None:
                import plotly.offline

                self._plotly_js = Static.of(plotly.offline.get_plotlyjs().encode())
            return self._plotly_js


@lru_cache(maxsize=4096)
def _config_yaml(document: str) -> str:
    """A document (JSON text) as YAML, each asked-for one made once, by libyaml where PyYAML
    has it (4x faster than its Python emitter, which holds the lock request threads share)."""
    import yaml

    return yaml.dump(json.loads(document), Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


class Handler(BaseHTTPRequestHandler):
    state: DashboardState  # set on the subclass make_server builds
    protocol_version = "HTTP/1.1"  # keep-alive: a polling browser reuses its connection
    timeout = IDLE_S
    disable_nagle_algorithm = True  # headers and body go out as written (no 40 ms delayed-ACK stall)

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

    def _send_made(self, made: Static | Snapshot, content_type: str, cache_control: str) -> None:
        """A body made ahead: 304 when the client holds it, gzipped when the client takes gzip."""
        headers = {"ETag": made.etag, "Cache-Control": cache_control, "Vary": "Accept-Encoding"}
        if made.etag in _etags(self.headers.get("If-None-Match", "")):
            self.send_response(HTTPStatus.NOT_MODIFIED)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
        elif _takes_gzip(self.headers.get("Accept-Encoding", "")):
            self._send(made.gzipped, content_type, headers={**headers, "Content-Encoding": "gzip"})
        else:
            self._send(made.body, content_type, headers=headers)

    def do_GET(self):  # noqa: N802 - http.server's naming
        host = self.headers.get("Host", "")
        if host.lower() not in self.state.hosts:  # a page of another site, reached by DNS rebinding
            self._send(f"this server answers to {', '.join(sorted(self.state.hosts))}, "
                       f"not to host {host!r}\n", "text/plain; charset=utf-8",
                       HTTPStatus.MISDIRECTED_REQUEST)
            return
        try:
            self._answer()
        except UserError as error:  # plain text, so a hostile name is never markup
            self._send(f"{error}\n", "text/plain; charset=utf-8", HTTPStatus.NOT_FOUND)
        except (ConnectionError, TimeoutError):
            raise  # the client went away: the connection ends here (`DashboardServer.handle_error`)
        except Exception as error:  # noqa: BLE001 - a config the store holds damaged: answer, never drop
            lines = str(error).strip().splitlines()
            line = f"{type(error).__name__}: {lines[0] if lines else ''}"
            print(f"shapesweep serve: {self.path}: {line}", file=sys.stderr, flush=True)
            self._send(f"{line}\n", "text/plain; charset=utf-8", HTTPStatus.INTERNAL_SERVER_ERROR)

    def _answer(self) -> None:
        url = urlparse(self.path)
        if url.path == "/":
            self._send_made(self.state.page, "text/html; charset=utf-8", "no-cache")
            return
        if url.path == "/plotly.min.js":
            self._send_made(self.state.plotly_js(), "text/javascript; charset=utf-8", "max-age=86400")
            return
        if url.path not in ("/api/version", "/api/dashboard", "/api/config"):
            self._send(f"not found: {url.path}\n", "text/plain; charset=utf-8", HTTPStatus.NOT_FOUND)
            return
        snapshot = self.state.snapshots.latest()
        if snapshot.error is not None:  # the builder's stderr line said it once already
            self._send(f"{snapshot.error}\n", "text/plain; charset=utf-8", HTTPStatus.INTERNAL_SERVER_ERROR)
        elif url.path == "/api/version":
            self._send(json.dumps({"version": snapshot.version}), "application/json",
                       headers={"Cache-Control": "no-store"})
        elif url.path == "/api/dashboard":
            self._send_made(snapshot, "application/json", "no-cache")
        else:
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            sweep, trial_id = query.get("sweep", ""), query.get("trial_id", "")
            document = json.dumps(config_document(snapshot, sweep, trial_id))
            name = f"{sweep}-{trial_id}".replace("/", "_") + ".yaml"
            self._send(_config_yaml(document), "application/x-yaml; charset=utf-8",
                       headers={"Content-Disposition": f'attachment; filename="{_header_safe(name)}"'})


def _etags(if_none_match: str) -> set[str]:
    return {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}


def _takes_gzip(accept_encoding: str) -> bool:
    for part in accept_encoding.lower().split(","):
        coding, _, params = part.partition(";")
        if coding.strip() in ("gzip", "*"):
            return params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


def _header_safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def _host_names(host: str, port: int) -> set[str]:
    """What a browser sends as `Host` for this server: loopback names and the bound host."""
    names = {"127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host}
    return {f"{name.lower()}:{port}" for name in names} | (names if port == 80 else set())


class DashboardServer(ThreadingHTTPServer):
    request_queue_size = 1024  # a burst of browsers queues, not refused
    daemon_threads = True
    state: DashboardState

    def handle_error(self, request, client_address):
        """A client that hung up (or went silent) mid-request is no error: no traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)

    def server_close(self):
        super().server_close()
        state = getattr(self, "state", None)  # a bind that failed closes before any state exists
        if state is not None:
            state.snapshots.close()


def _bind_problem(error: OSError, host: str, port: int) -> str:
    """The one line a failed bind gives (a taken port the usual one)."""
    if error.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is in use (another server holds it); --port 0 picks a free one"
    return f"cannot listen on {host}:{port}: {error.strerror or error}; --port 0 picks a free port"


def make_server(root: str, host: str = "127.0.0.1", port: int = 8050, poll_s: float = 3.0,
                refresh_s: float = 0.5, storage: str | None = None) -> DashboardServer:
    """A ready-to-serve HTTP server (port 0 picks a free port; see `server.server_address`).
    The port is bound first, so a taken one is refused (UserError, `--port`) before the
    builder starts. The store is checked for new trials every `refresh_s`; `storage`: the
    catalog's URL (`--storage`; default the root's own)."""
    handler: type[Handler] = type("DashboardHandler", (Handler,), {})
    try:
        server = DashboardServer((host, port), handler)
    except OSError as error:
        raise UserError(_bind_problem(error, host, port), key="--port") from None
    try:
        state = DashboardState(root, poll_s, refresh_s, storage)
    except BaseException:
        server.server_close()
        raise
    handler.state = server.state = state
    state.hosts = _host_names(host, server.server_address[1])
    return server
