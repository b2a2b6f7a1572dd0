"""The SLURM batch script (sweep/slurm/shapesweep.sbatch) on a real SLURM: Debian's slurmctld
and two slurmd (nodes n1 and n2, one CPU each) on this machine, with munge, in a temp folder.
`sbatch` of the script runs a sweep on a Ray head on n1 and a Ray worker on n2 (srun), and
every trial lands in the Parquet store once; a second sweep (one node) stopped mid-way as
the allocation's end stops it (USR1 to the batch shell) is requeued by the script, and the
requeued job resumes it without repeating a trial. `make slurm` (a prerequisite of `make
test`) installs the packages; the test installs them itself where it may (root and apt).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sweep_helpers import CHILD_ENV, TINY_TRAIN, pairs, processes_naming, write_space

import shapesweep
from shapesweep.results.store import load_trials, sweep_dir
from shapesweep.sweep.slurm import SCRIPT_NAME, script_path
from shapesweep.sweep.slurm.driver import sweep_command

REPO = Path(__file__).resolve().parent.parent
PACKAGE = Path(shapesweep.__file__).parent  # a traceback through it is ours
SCRIPT = script_path()
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "slurmctld", "slurmd", "munged")
NODES = ("n1", "n2")
JOB_DONE_S = 900  # a job's wait on this 2-core machine under other tests' load
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _install_or_skip() -> None:
    """The packages, through `make slurm` where they are missing and this may install them."""
    if all(shutil.which(c) for c in COMMANDS):
        return
    if os.geteuid() != 0:
        pytest.skip("SLURM is not installed and installing it needs root: `make slurm` (as "
                    "root) installs Debian's slurm-wlm and munge")
    if shutil.which("apt-get") is None:
        pytest.skip("SLURM is not installed and there is no apt-get here to install Debian's "
                    "slurm-wlm and munge (`make slurm`)")
    done = subprocess.run(["make", "-s", "slurm"], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0 or not all(shutil.which(c) for c in COMMANDS):
        if os.environ.get("CI"):
            pytest.fail(f"`make slurm` failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        pytest.skip(f"`make slurm` could not install slurm-wlm and munge: "
                    f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")


@dataclass
class Slurm:
    """A running local SLURM: its folder, and the environment its commands need."""

    folder: Path
    env: dict[str, str]
    daemons: list[subprocess.Popen]

    def command(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        if check:
            assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
        return done.stdout

    def job(self, job: str) -> dict[str, str]:
        """`scontrol show job`'s fields (a finished job stays there for MinJobAge)."""
        text = self.command("scontrol", "-o", "show", "job", job)
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait(self, job: str, until, seconds: float = JOB_DONE_S) -> dict[str, str]:
        deadline = time.monotonic() + seconds
        while not until(fields := self.job(job)):
            assert time.monotonic() < deadline, (fields, self.log(job)[-4000:])
            time.sleep(1)
        return fields

    def log(self, job: str) -> str:
        path = self.folder / f"job-{job}.out"
        return path.read_text(errors="replace") if path.exists() else "(no log)"

    def submit(self, *argv: str, env: dict[str, str], nodes: int = 2) -> str:
        done = subprocess.run(
            ["sbatch", "--parsable", f"--nodes={nodes}", f"--output={self.folder}/job-%j.out",
             str(SCRIPT), *argv], env=env, capture_output=True, text=True, timeout=60,
            cwd=self.folder)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().split(";")[0]


def _conf(folder: Path, munge_socket: Path) -> str:
    host = socket.gethostname().split(".")[0]
    lines = [
        "ClusterName=shapesweep-test", f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}", "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}", "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool/%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd-%n.pid",
        f"SlurmctldLogFile={folder}/log/slurmctld.log", f"SlurmdLogFile={folder}/log/slurmd-%n.log",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobRequeue=1",
        "MpiDefault=none", "ReturnToService=2", "KillWait=120", "MinJobAge=3600",
        # two nodes on this machine, each with a port of its own
        *(f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={_free_port()} CPUs=1 "
          "State=UNKNOWN" for node in NODES),
        f"PartitionName=test Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def _start(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


@pytest.fixture(scope="module")
def slurm() -> Iterator[Slurm]:
    _install_or_skip()
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as root here: the test needs root")
    folder = Path(tempfile.mkdtemp(prefix="ss-slurm-"))  # short: Ray's socket paths must fit
    key_dir, munge_dir = folder / "munge-key", folder / "munge"
    for sub in ("state", "log", *(f"spool/{n}" for n in NODES)):
        (folder / sub).mkdir(parents=True)
    key_dir.mkdir(mode=0o700)
    munge_dir.mkdir()
    key = key_dir / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    socket_path = munge_dir / "socket"
    conf = folder / "slurm.conf"
    conf.write_text(_conf(folder, socket_path))
    env = {**CHILD_ENV, "SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen] = []
    cluster = Slurm(folder, env, daemons)
    try:
        subprocess.run(
            ["munged", f"--key-file={key}", f"--socket={socket_path}",
             f"--pid-file={munge_dir}/munged.pid", f"--log-file={munge_dir}/munged.log",
             f"--seed-file={munge_dir}/munged.seed", "--force"],
            check=True, env=env, capture_output=True, timeout=60)
        daemons.append(_start(["slurmctld", "-D", "-i", "-f", str(conf)],
                              folder / "log" / "slurmctld.out", env))
        for node in NODES:
            daemons.append(_start(["slurmd", "-D", "-N", node, "-f", str(conf)],
                                  folder / "log" / f"slurmd-{node}.out", env))
        deadline = time.monotonic() + 120
        while cluster.command("sinfo", "-h", "-o", "%T", check=False).split() != ["idle"]:
            assert time.monotonic() < deadline, (
                cluster.command("sinfo", check=False),
                *(p.read_text()[-1500:] for p in (folder / "log").iterdir()))
            time.sleep(0.5)
        yield cluster
    finally:
        _stop(cluster, munge_dir, socket_path)
        shutil.rmtree(folder, ignore_errors=True)


def _stop(cluster: Slurm, munge_dir: Path, socket_path: Path) -> None:
    """Every job cancelled and gone, then the daemons and munged stopped."""
    if cluster.daemons:
        cluster.command("scancel", "--full", "--partition=test", check=False)
        deadline = time.monotonic() + 150
        while (cluster.command("squeue", "-h", check=False).strip()
               and time.monotonic() < deadline):
            time.sleep(1)
    for daemon in reversed(cluster.daemons):
        try:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        except ProcessLookupError:
            pass
    subprocess.run(["munged", f"--socket={socket_path}", "--stop"], capture_output=True,
                   timeout=60)
    for pid in processes_naming(str(cluster.folder)):  # a job's leftovers, if any
        os.kill(pid, signal.SIGKILL)



def _job_env(cluster: Slurm) -> dict[str, str]:
    """What a user's shell hands sbatch: the venv's Python, Ray's folders here, and a Ray
    token of this test's own (the script turns token auth on for every node and the driver)."""
    token = cluster.folder / "ray-token"
    if not token.exists():
        token.write_text(secrets.token_hex(32))
    env = {key: value for key, value in cluster.env.items() if not key.startswith("RAY_")}
    return {**env, "SHAPESWEEP_PYTHON": sys.executable,
            "SHAPESWEEP_RAY_TMPDIR": str(cluster.folder / "ray"),
            "RAY_AUTH_TOKEN_PATH": str(token),
            # a node's Ray may start slowly on a busy 2-core machine: more tries
            "SHAPESWEEP_RAY_TRIES": "6"}


def _finished(fields: dict[str, str]) -> bool:
    return fields.get("JobState") in FINAL_STATES


def _trials(root: Path, name: str) -> dict[tuple[str, int], tuple[str, object]]:
    """Each (candidate key, seed) in the store with its trial id and finish time, after
    checking there is one completed row for each."""
    rows = load_trials(str(root), [name])
    assert (rows["status"] == "completed").all(), rows[["key", "seed", "status", "error"]]
    found = {(k, s): (t, f) for k, s, t, f in zip(rows["key"], rows["seed"], rows["trial_id"],
                                                  rows["finished_at"], strict=True)}
    assert len(found) == len(rows)
    return found


def _trained(root: Path, name: str) -> list[int]:
    """The trials Ray Tune started, per driver (one experiment folder each), oldest first."""
    experiments = sorted((Path(sweep_dir(str(root), name)) / "_ray").iterdir(),
                         key=lambda p: p.stat().st_mtime)
    return [sum(1 for p in e.iterdir() if p.is_dir()) for e in experiments if e.is_dir()]


def _no_traceback_of_ours(log: str) -> None:
    """No traceback runs through shapesweep's code. Ray's own may be there: a node's start
    that failed on a busy machine and was tried again prints one."""
    ours = [line for line in log.splitlines() if f'File "{PACKAGE}/' in line]
    assert not ours, log[-4000:]


def _no_ray_left(cluster: Slurm, job: str) -> None:
    ray_folder = str(cluster.folder / "ray" / f"ray-{job}-")
    deadline = time.monotonic() + 60  # the nodes were told to stop; give them a moment
    while processes_naming(ray_folder) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_naming(ray_folder) == []


@pytest.mark.slow
def test_sbatch_runs_a_sweep_on_a_head_and_a_worker_node_every_trial_once(slurm, tmp_path):
    space = write_space(tmp_path, name="slurm-once")
    root = tmp_path / "sweeps"
    job = slurm.submit(str(space), "--root", str(root), "--scheduler", "fifo",
                       env=_job_env(slurm))
    fields = slurm.wait(job, _finished)
    log = slurm.log(job)
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), log[-4000:]
    assert f"{SCRIPT_NAME}: every node is up; running: shapesweep run {space}" in log
    _no_traceback_of_ours(log)
    expected = pairs(space)
    assert set(_trials(root, "slurm-once")) == expected
    assert _trained(root, "slurm-once") == [len(expected)]  # each trial trained once
    # Both nodes ran Ray (the worker from srun, on n2) and trained trials there.
    for node in NODES:
        outs = (slurm.folder / "ray" / f"ray-{job}-{node}").glob("session_*/logs/worker-*.out")
        assert any(":actor_name:run_trial" in p.read_text(errors="replace") for p in outs), node
    assert f"{SCRIPT_NAME}: Ray stopped" in log, log[-2000:]
    _no_ray_left(slurm, job)


@pytest.mark.slow
def test_a_job_stopped_before_its_end_is_requeued_and_resumes_without_repeats(slurm, tmp_path):
    seeds = (0, 1)
    space = write_space(tmp_path, name="slurm-requeue", seeds=list(seeds),
                        train={**TINY_TRAIN, "tokens": 32768})
    expected = pairs(space, seeds)
    root = tmp_path / "sweeps"
    # One node (the first test has two): half the Ray processes on this 2-core machine.
    job = slurm.submit(str(space), "--root", str(root), "--scheduler", "fifo",
                       env=_job_env(slurm), nodes=1)
    trials = Path(sweep_dir(str(root), "slurm-requeue")) / "trials"
    deadline = time.monotonic() + JOB_DONE_S
    while not list(trials.glob("*.parquet")):  # a trial filed: mid-way
        assert not _finished(slurm.job(job)), slurm.log(job)[-4000:]
        assert time.monotonic() < deadline, slurm.log(job)[-4000:]
        time.sleep(0.2)
    # What SLURM sends 120 s before the time limit (--signal=B:USR1@120): to the batch shell.
    slurm.command("scancel", "--signal=USR1", "--batch", job)
    fields = slurm.wait(job, lambda f: f.get("Restarts") == "1" and f.get("JobState") == "PENDING")
    filed = _trials(root, "slurm-requeue")
    assert 1 <= len(filed) < len(expected), slurm.log(job)[-4000:]
    first = slurm.log(job)
    assert f"{SCRIPT_NAME}: job {job} requeued: its next start resumes the sweep" in first
    assert "shapesweep run: interrupted" in first, first[-4000:]
    slurm.command("scontrol", "update", f"JobId={job}", "StartTime=now")  # not in 2 minutes
    fields = slurm.wait(job, _finished)
    log = slurm.log(job)
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), log[-4000:]
    second = log[len(first):]
    assert (f"{SCRIPT_NAME}: every node is up; running: shapesweep resume slurm-requeue "
            f"--root {root}") in second, second[-4000:]
    summary = re.search(r"sweep slurm-requeue: finished - (\d+) completed, 0 stopped early, "
                        r"0 failed \((\d+) trials this run\)", second)
    assert summary, second[-4000:]
    missing = len(expected) - len(filed)
    assert (int(summary[1]), int(summary[2])) == (len(expected), missing), summary[0]
    _no_traceback_of_ours(log)
    final = _trials(root, "slurm-requeue")
    assert set(final) == expected
    assert {pair: final[pair] for pair in filed} == filed  # none of the first start's again
    assert _trained(root, "slurm-requeue")[-1] == missing  # the requeued start's driver
    _no_ray_left(slurm, job)


# --- Without SLURM: the script's refusals and the requeued start's command.

def test_the_script_outside_an_allocation_says_so_in_one_line(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    done = subprocess.run(["bash", str(SCRIPT), "demo-quick"], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{SCRIPT_NAME}: not inside a SLURM allocation (SLURM_JOB_ID is unset)")
    assert list(tmp_path.iterdir()) == []


def test_the_script_ships_with_the_package_and_its_path_is_printed():
    assert SCRIPT.is_file() and os.access(SCRIPT, os.X_OK)
    assert SCRIPT.read_text().startswith("#!/usr/bin/env bash\n")
    printed = subprocess.run([sys.executable, "-m", "shapesweep.sweep.slurm"],
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0 and printed.stdout.strip() == str(SCRIPT)
    assert '"shapesweep.sweep.slurm" = ["shapesweep.sbatch"]' in (REPO / "pyproject.toml").read_text()


def test_a_requeued_start_resumes_the_saved_sweep_with_the_options_resume_takes(tmp_path):
    space = write_space(tmp_path, name="requeued")
    root = str(tmp_path / "sweeps")
    argv = [str(space), "--root", root, "--seeds", "2", "--max-concurrent", "3",
            "--retry-failed", "--scheduler", "fifo"]
    assert sweep_command(argv, 0) == ["run", *argv]
    assert sweep_command(argv, 1) == ["run", *argv]  # the first start saved nothing
    saved = Path(sweep_dir(root, "requeued")) / "sweep.json"
    saved.parent.mkdir(parents=True)
    saved.write_text("{}")
    assert sweep_command(argv, 2) == ["resume", "requeued", "--root", root, "--max-concurrent",
                                      "3", "--retry-failed"]
    assert sweep_command([*argv, "--name", "other"], 1)[:2] == ["run", str(space)]


def test_bad_options_are_one_line_before_anything_starts(tmp_path):
    done = subprocess.run([sys.executable, "-m", "shapesweep.sweep.slurm.driver", "0",
                           "demo-quick", "--bogus"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{SCRIPT_NAME}: error: unrecognized arguments: --bogus")
