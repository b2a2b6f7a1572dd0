"""Real Ray nodes for the cluster tests: `ray start` processes on loopback, each in its own
process group and temp folder, so a test can stop one node (or kill it, as a lost machine)
without touching the others."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")
# On SIGTERM a node first drains for up to 30 s (for Ray Serve); nothing here needs it. The
# head's GCS declares a node dead after its health check fails 5 times 3 s apart (Ray 2.60's
# defaults); here after 3 checks 1 s apart, so a lost node's trial moves on in seconds. Each
# check still waits its default 10 s for a live node's answer, so a slow node is not lost.
NODE_ENV = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}
# Loopback test clusters: no token auth (the cluster test in test_sweep_run covers it);
# the nodes, the probe and the drivers must agree, so callers put this in the env they pass
# here and to their drivers.
TEST_ENV = {"RAY_AUTH_MODE": "disabled"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class NodeExited(AssertionError):
    """A node's `ray start` ended while the test waited for it (its log's tail says why)."""


def _start(args: list[str], temp_dir: Path, num_cpus: int, env: dict) -> subprocess.Popen:
    """`ray start ... --block` in a new session (its pid is the node's process group), its
    output kept in `temp_dir`/start.log for the message of a node that does not come up."""
    temp_dir.mkdir(parents=True, exist_ok=True)
    with open(temp_dir / "start.log", "ab") as log:
        return subprocess.Popen(
            [RAY, "start", *args, "--node-ip-address", "127.0.0.1", "--num-cpus", str(num_cpus),
             "--temp-dir", str(temp_dir), "--disable-usage-stats", "--block"],
            env={**env, **NODE_ENV}, start_new_session=True,
            stdout=log, stderr=subprocess.STDOUT)


def log_tail(temp_dir: Path, chars: int = 1500) -> str:
    """The end of a node's `ray start` output and of its GCS's and raylet's logs."""
    tails = []
    for path in [temp_dir / "start.log", *sorted(temp_dir.glob("session_latest/logs/gcs_server.*")),
                 *sorted(temp_dir.glob("session_latest/logs/raylet.*"))]:
        try:
            tails.append(f"--- {path.name}:\n{path.read_text(errors='replace')[-chars:]}")
        except OSError:
            continue
    return "\n".join(tails) or "(no logs)"


HEAD_ATTEMPTS = 3  # a free port is free when chosen; another process may bind it before Ray does


def start_head(temp_dir: Path, num_cpus: int, env: dict,
               probe_env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """A head node (no dashboard) and its address, once a driver started with `probe_env`
    (default `env`) joins it and finds it alive.

    A head whose `ray start` exits while starting (its port taken meanwhile: other tests'
    Rays bind ports of the same range) is started again on another port."""
    for attempt in range(1, HEAD_ATTEMPTS + 1):
        port = free_port()
        head = _start(["--head", "--port", str(port), "--include-dashboard=false"], temp_dir,
                      num_cpus, env)
        address = f"127.0.0.1:{port}"
        try:
            wait_for_nodes(address, 1, probe_env or env, head)
            return head, address
        except NodeExited:
            stop_node(head)
            if attempt == HEAD_ATTEMPTS:
                raise
        except BaseException:
            stop_node(head)
            raise
    raise AssertionError("unreachable")


def start_worker(address: str, temp_dir: Path, num_cpus: int, env: dict) -> subprocess.Popen:
    return _start(["--address", address], temp_dir, num_cpus, env)


def wait_for_nodes(address: str, count: int, env: dict, process: subprocess.Popen | None = None,
                   timeout_s: float = 120.0) -> None:
    """Poll the cluster until `count` nodes are alive in it (`process`: the node whose exit
    ends the wait, with its log)."""
    probe = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
             "print(sum(n['Alive'] for n in ray.nodes()))")
    deadline = time.monotonic() + timeout_s
    temp_dir = _temp_dir_of(process)
    last = ""
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise NodeExited(f"the Ray node at {address} exited with {process.returncode}:\n"
                             f"{log_tail(temp_dir) if temp_dir else ''}")
        try:
            done = subprocess.run([sys.executable, "-c", probe, address], env=env,
                                  capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            last = "the probe's ray.init did not return in 60 s"
            continue
        if done.returncode == 0 and done.stdout.strip().splitlines()[-1:] == [str(count)]:
            return
        last = (done.stdout + done.stderr)[-800:]
        time.sleep(0.5)
    raise AssertionError(f"{count} Ray node(s) at {address} were not alive in {timeout_s} s; "
                         f"the last probe said:\n{last}\n"
                         f"{log_tail(temp_dir) if temp_dir else ''}")


def _temp_dir_of(process: subprocess.Popen | None) -> Path | None:
    """The `--temp-dir` a node of `_start` was given."""
    if process is None or not isinstance(process.args, list) or "--temp-dir" not in process.args:
        return None
    return Path(process.args[process.args.index("--temp-dir") + 1])


def kill_node(node: subprocess.Popen) -> None:
    """SIGKILL a node's whole process group (its raylet, object store, workers): a lost machine."""
    try:
        os.killpg(node.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    node.wait(timeout=30)


def stop_node(node: subprocess.Popen) -> None:
    """Stop a node as `--block` expects (SIGTERM to its group), killing it if it lingers."""
    if node.poll() is None:
        try:
            os.killpg(node.pid, signal.SIGTERM)
            node.wait(timeout=30)
        except subprocess.TimeoutExpired:
            kill_node(node)
        except ProcessLookupError:
            pass
    kill_node(node)  # whatever of its group outlived it
