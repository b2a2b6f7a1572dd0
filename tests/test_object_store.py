"""A sweep whose results root is an S3 bucket (cluster guide: results on s3://).

moto's server (a dev dependency) is a real S3 endpoint on loopback; pyarrow reaches it
through AWS_ENDPOINT_URL, as it would MinIO or AWS. The sweep's Parquet fragments, its
space and its options all live in the bucket; the catalog is a database given by URL.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from sweep_helpers import run, write_space

from shapesweep.results.store import load_trials, read_sweep_file
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import load_space
from shapesweep.sweep.cli.main import main as shapesweep

pytestmark = pytest.mark.slow
BUCKET = "shapesweep-test"


def _start_moto(moto: str) -> tuple[subprocess.Popen, str] | None:
    """moto_server on a free port, once it answers (it imports Flask and moto: seconds on a
    loaded machine); None when it exits first (its port taken before it bound it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        try:
            urllib.request.urlopen(url, timeout=5)
            return server, url
        except OSError:
            time.sleep(0.2)
    if server.poll() is not None:
        return None
    server.kill()
    server.wait(timeout=10)
    raise RuntimeError(f"moto_server did not answer at {url} in 120 s")


@pytest.fixture(scope="module")
def s3_endpoint():
    moto = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    assert moto, "moto_server is missing: `pip install -e .[dev]` installs moto[server]"
    for _ in range(3):
        if started := _start_moto(moto):
            break
    else:
        raise RuntimeError("moto_server exited on start three times")
    server, url = started
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def bucket(s3_endpoint, monkeypatch) -> str:
    for name, value in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "test",
                        "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                        "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    pafs.S3FileSystem(endpoint_override=s3_endpoint, allow_bucket_creation=True).create_dir(BUCKET)
    return f"s3://{BUCKET}/sweeps"


def test_sweep_with_results_in_s3_then_resume_and_dashboard(local_ray, bucket, tmp_path, capsys):
    space_path = write_space(tmp_path)
    storage = f"sqlite:///{tmp_path / 'catalog.db'}"

    # An object-store root has no default catalog database: one line says what to pass.
    assert shapesweep(["run", str(space_path), "--root", bucket, "--no-progress"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--storage" in error[0]

    assert run("run", str(space_path), "--root", bucket, "--storage", storage,
               "--scheduler", "fifo", "--max-concurrent", "2") == 0
    trials = load_trials(bucket, ["tiny-depths"])
    assert sorted(trials["key"]) == sorted(c.key for c in plan(load_space(space_path)).candidates)
    assert set(trials["status"]) == {"completed"}

    options = json.loads(read_sweep_file(bucket, "tiny-depths", "sweep.json"))
    assert options["space"] == "space.yaml"  # beside sweep.json, wherever the root moves
    saved = load_space(f"{bucket}/tiny-depths/{options['space']}")
    assert saved.space_hash == load_space(space_path).space_hash

    def fragments() -> list[tuple[str, int]]:
        s3 = pafs.FileSystem.from_uri(bucket)[0]
        found = s3.get_file_info(pafs.FileSelector(f"{BUCKET}/sweeps/tiny-depths", recursive=True))
        return sorted((f.path, f.size) for f in found if f.path.endswith(".parquet"))

    written = fragments()
    assert len(written) >= 2  # trials and curves
    capsys.readouterr()
    assert run("resume", "tiny-depths", "--root", bucket, "--storage", storage) == 0
    assert "(0 trials this run); results in s3://" in capsys.readouterr().out
    assert fragments() == written  # nothing missing, nothing trained, nothing written

    report = tmp_path / "report.html"
    assert run("dashboard", "tiny-depths", "--root", bucket, "--out", str(report)) == 0
    assert report.stat().st_size > 100_000
