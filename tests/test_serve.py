"""The live server as browsers and a sweep use it: answers made ahead (ETag and 304, gzip,
keep-alive), a trial that lands is in the next payload, a client that hangs up early leaves
no traceback, and the payload's builder process ends with the server, however it ends.

Real servers on real sockets: in this process, or `shapesweep serve` as a subprocess where
its terminal output or its death is what is checked. Latency is `benchmarks/bench_server.py`'s.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from synthetic import synthetic_sweep

from shapesweep.dashboards.report import build_payload, expand
from shapesweep.dashboards.server import make_server
from shapesweep.dashboards.snapshots import WAITING_VERSION, store_version
from shapesweep.results.store import write_trial

CHECKOUT = Path(__file__).resolve().parents[1]


def write_store(root: str) -> str:
    for row, curve in synthetic_sweep("s", 4, families=("hourglass",), seeds=1, tune=None, seed=3):
        write_trial(root, "s", row, curve)
    return root


@contextlib.contextmanager
def serving(root: str):
    server = make_server(root, "127.0.0.1", 0, refresh_s=0.1)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    assert server.state.snapshots.wait_built(300)  # these tests read the built payload
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def store(tmp_path) -> str:
    return write_store(str(tmp_path / "sweeps"))


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A server over a store that no test changes (one builder start for them all)."""
    with serving(write_store(str(tmp_path_factory.mktemp("served") / "sweeps"))) as port:
        yield port


def get(port: int, path: str, headers: dict | None = None,
        connection: http.client.HTTPConnection | None = None) -> http.client.HTTPResponse:
    """The response, its body read (`response.body`)."""
    connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", path, headers={"Host": f"127.0.0.1:{port}", **(headers or {})})
    response = connection.getresponse()
    response.body = response.read()
    return response


def served_version(port: int) -> str:
    return json.loads(get(port, "/api/version").body)["version"]


@pytest.mark.parametrize("path", ["/api/dashboard", "/", "/plotly.min.js"])
def test_answers_carry_an_etag_revalidate_to_304_and_come_gzipped_when_asked(live, path):
    plain = get(live, path)
    etag = plain.getheader("ETag")
    assert plain.status == 200 and re.fullmatch(r'"[0-9a-f]{20}"', etag or "")
    assert plain.getheader("Content-Encoding") is None and plain.getheader("Vary") == "Accept-Encoding"
    zipped = get(live, path, {"Accept-Encoding": "br, gzip;q=0.8"})
    assert zipped.getheader("Content-Encoding") == "gzip" and zipped.getheader("ETag") == etag
    assert gzip.decompress(zipped.body) == plain.body and len(zipped.body) < len(plain.body)
    refused = get(live, path, {"Accept-Encoding": "gzip;q=0, identity"})
    assert refused.getheader("Content-Encoding") is None and refused.body == plain.body
    for held in (etag, f"W/{etag}", f'"other", {etag}'):
        unchanged = get(live, path, {"If-None-Match": held, "Accept-Encoding": "gzip"})
        assert unchanged.status == 304 and unchanged.body == b"" and unchanged.getheader("ETag") == etag
    assert get(live, path, {"If-None-Match": '"other"'}).status == 200
    if path == "/api/dashboard":
        assert plain.getheader("Cache-Control") == "no-cache"  # a browser revalidates on each poll
        assert json.loads(plain.body)["version"] == served_version(live)


def test_a_browser_keeps_one_connection_for_every_request(live):
    connection = http.client.HTTPConnection("127.0.0.1", live, timeout=60)
    opened = None
    for path in ("/", "/api/version", "/api/dashboard", "/api/config?sweep=s&trial_id=none", "/api/version"):
        response = get(live, path, connection=connection)
        assert response.version == 11 and not response.will_close, path
        opened = opened or connection.sock
        assert connection.sock is opened  # never reopened
    connection.close()


def test_a_trial_that_lands_is_in_the_next_payload(store):
    with serving(store) as live:
        _lands_in_the_next_payload(store, live)


def _lands_in_the_next_payload(store: str, live: int) -> None:
    before = get(live, "/api/dashboard")
    assert get(live, "/api/dashboard").body == before.body  # nothing landed: the same payload
    row, curve = synthetic_sweep("s", 1, families=("hourglass",), seeds=1, tune=None, seed=9)[0]
    row["trial_id"] = "landed"
    write_trial(store, "s", row, [{**point, "trial_id": "landed"} for point in curve])
    version, deadline = json.loads(before.body)["version"], time.monotonic() + 60
    while served_version(live) == version:
        assert time.monotonic() < deadline, "the server never saw the trial land"
        time.sleep(0.05)
    after = get(live, "/api/dashboard", {"If-None-Match": before.getheader("ETag")})
    assert after.status == 200 and after.getheader("ETag") != before.getheader("ETag")
    assert "landed" in expand(json.loads(after.body)["rows"])["trial_id"]
    config = get(live, "/api/config?sweep=s&trial_id=landed")
    assert config.status == 200 and b"trial_id: landed" in config.body


def test_the_version_moves_when_a_trial_lands_whole_not_at_its_curves(store):
    """The race CI met: the builder saw the curves fragment `write_trial` writes first, built
    a payload without the trial's row, and the row's landing came after the test looked."""
    before = store_version(store)
    row, curve = synthetic_sweep("s", 1, families=("hourglass",), seeds=1, tune=None, seed=9)[0]
    trials_fragment = write_trial(store, "s", {**row, "trial_id": "landed"},
                                  [{**point, "trial_id": "landed"} for point in curve])
    landed = store_version(store)
    os.remove(trials_fragment)  # the store as it was between the curves and the row
    assert landed != before and store_version(store) == before


def test_paths_outside_the_api_are_not_found(live):
    for path in ("/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/plotly.min.js/../../../etc/passwd",
                 "//etc/passwd", "/api/../api/../../etc/passwd", "/s/trials", "/api/dashboard/..%2f..%2fs"):
        response = get(live, path)
        assert response.status == 404 and b"root:" not in response.body and b"PAR1" not in response.body


def _serve(root: str) -> tuple[subprocess.Popen, int]:
    server = subprocess.Popen([sys.executable, "-m", "shapesweep.sweep.cli", "serve", "--root", root, "--port", "0"],
                              cwd=CHECKOUT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", server.stdout.readline())
    assert match, server.communicate(timeout=30)
    port = int(match.group(1))
    deadline = time.monotonic() + 300
    while served_version(port) == WAITING_VERSION and time.monotonic() < deadline:
        time.sleep(0.1)  # answered at once; these tests read the built payload
    return server, port


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a browser tab closed mid-download does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_clients_that_hang_up_early_leave_no_traceback(store):
    server, port = _serve(store)
    try:
        assert get(port, "/api/dashboard").status == 200  # the payload is made: answers go out at once
        ask = lambda path: f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()  # noqa: E731
        for _ in range(10):
            socket.create_connection(("127.0.0.1", port)).close()  # connects, says nothing
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"GET /api/dash")  # half a request line, then gone
            _reset(sock)
            for path in ("/plotly.min.js", "/api/dashboard", "/", "/api/version", "/api/config?sweep=s&trial_id=x"):
                for hang_up in (_reset, socket.socket.close):
                    sock = socket.create_connection(("127.0.0.1", port))
                    sock.sendall(ask(path) * 3)  # pipelined: the server is still writing when the client goes
                    sock.recv(100)
                    hang_up(sock)
            sock = socket.create_connection(("127.0.0.1", port))  # a foreign host's answer, unread
            sock.sendall(b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n")
            _reset(sock)
        assert get(port, "/api/version").status == 200  # still serving
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=60)
    finally:
        server.kill()
    assert "Traceback" not in err and "Error" not in err, err
    assert err.strip() == "shapesweep serve: interrupted"


@pytest.mark.slow  # fast tier: a real process end to end; make test runs it
def test_the_payload_builder_ends_with_the_server_however_it_ends(store):
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    server = make_server(store, "127.0.0.1", 0)
    (builder,) = [p for p in me.children(recursive=True) if p.pid not in before]
    assert builder.pid == server.state.snapshots.pid
    server.server_close()
    assert builder.wait(30) is not None or not builder.is_running()

    served, port = _serve(store)
    try:
        assert get(port, "/api/version").status == 200
        (builder,) = psutil.Process(served.pid).children()
        os.kill(served.pid, signal.SIGKILL)  # no cleanup runs: the builder sees its pipe close
        served.wait(30)
        builder.wait(30)
        assert not builder.is_running()
    finally:
        served.kill()
        served.communicate()


@pytest.mark.slow  # fast tier: a real process end to end; make test runs it
def test_a_taken_port_is_refused_in_one_line_and_port_0_serves_on_a_free_one(store):
    """`serve --port P` with P taken: one line naming the port and suggesting --port 0, exit
    2, no traceback, no builder left; `--port 0` picks a free port and prints its URL."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "shapesweep.sweep.cli", "serve", "--root", store,
                               "--port", str(port)], cwd=CHECKOUT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"port {port}" in done.stderr and "in use" in done.stderr and "--port 0" in done.stderr
    assert done.stdout == ""
    server, free = _serve(store)  # prints http://127.0.0.1:PORT/, and answers there
    try:
        assert free != port and get(free, "/api/version").status == 200
    finally:
        server.kill()
        server.communicate()


def test_the_first_request_on_a_fresh_root_is_answered_before_the_first_build(store):
    """The builder (a fresh interpreter that imports pandas and plotly, then reads the whole
    store) has sent nothing when the first requests come: they are answered from what the
    server has, a waiting payload of the same keys as an empty store's, and the real one
    follows under a new version."""
    server = make_server(store, "127.0.0.1", 0, refresh_s=0.1)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        first = json.loads(get(port, "/api/version").body)
        waiting = json.loads(get(port, "/api/dashboard").body)
        assert first["version"] == WAITING_VERSION and waiting["version"] == WAITING_VERSION
        assert waiting["sweeps"] == [] and waiting["figures"] == []
        empty = json.loads(build_payload(str(Path(store).parent / "empty"), None))
        assert set(waiting) == set(empty) and set(waiting["rows"]) == set(empty["rows"])
        assert server.state.snapshots.wait_built(300)
        built = json.loads(get(port, "/api/dashboard").body)
        assert built["version"] == served_version(port) == store_version(store)
        assert [s["name"] for s in built["sweeps"]] == ["s"]
    finally:
        server.shutdown()
        server.server_close()
