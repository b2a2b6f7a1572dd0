"""Every stop signal stops a sweep as Ctrl-C does (issue 39): SIGINT, SIGTERM and SIGHUP sent
to the driver's whole process group, before Ray starts, while it starts and while a trial
runs, end in exit 130 and the `interrupted` line, with Ray shut down and nothing of it left
(its session folder, `local-ray.json`, live curves, processes); and a session folder a
driver killed during `ray.init` left is removed by the next run."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from sweep_helpers import CHILD_ENV, TINY_TRAIN, processes_naming, write_space

from shapesweep.results.catalog import Catalog, default_catalog_url
from shapesweep.results.store import sweep_dir
from shapesweep.sweep.driver import ray_compat, ray_session
from shapesweep.sweep.driver.ray_session import SESSION_RECORD, clear_dead_session, ray_storage


def test_a_local_ray_starts_in_its_own_group_without_rays_sigterm_handler():
    """What `ray_compat.local_ray_start` relies on, as Ray 2.60 has it: its processes are
    spawned through `services.ConsolePopen` (a Popen), and `Node` and `ray.init` set their
    SIGTERM handlers through `utils.set_sigterm_handler`."""
    import subprocess as sp

    from ray._private import node, services, utils, worker

    assert issubclass(services.ConsolePopen, sp.Popen)
    assert "process = ConsolePopen(" in inspect.getsource(services.start_ray_process)
    for module in (node, worker):
        assert "ray._private.utils.set_sigterm_handler(" in inspect.getsource(module)
    popen, handler = services.ConsolePopen, utils.set_sigterm_handler
    with ray_compat.local_ray_start():
        utils.set_sigterm_handler(lambda *_: None)  # left out: ours stays in force
        assert signal.getsignal(signal.SIGTERM) is not None
        if utils.detect_fate_sharing_support():
            child = services.ConsolePopen([sys.executable, "-c", "import os; print(os.getpgid(0))"],
                                          stdout=sp.PIPE, text=True)
            assert int(child.communicate()[0]) == child.pid != os.getpgid(0)  # a group of its own
    assert (services.ConsolePopen, utils.set_sigterm_handler) == (popen, handler)


def test_a_session_left_by_a_driver_killed_during_ray_init_is_removed_by_the_next(tmp_path):
    """The record written before `ray.init` names no session yet: the next driver removes the
    dead driver's session folder (named by its pid, made since it began), and no other."""
    dead = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    record = {"session_dir": None, "pid": dead.pid, "started": ray_session._started(dead.pid),
              "temp_dir": str(tmp_path / "ray"), "since": time.time()}
    older = tmp_path / "ray" / f"session_2020-01-01_00-00-00_000000_{dead.pid}"
    older.mkdir(parents=True)
    os.utime(older, (time.time() - 3600,) * 2)  # a folder of an earlier process with that pid
    others = tmp_path / "ray" / f"session_2099-01-01_00-00-00_000000_{dead.pid + 1}"
    others.mkdir()
    left = tmp_path / "ray" / f"session_2099-01-01_00-00-00_000000_{dead.pid}"
    (left / "logs").mkdir(parents=True)
    path = ray_storage(str(tmp_path / "root"), "s") / SESSION_RECORD
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    clear_dead_session(str(tmp_path / "root"), "s")  # the driver still runs: nothing touched
    assert left.exists() and path.exists()
    dead.kill()
    dead.wait()
    clear_dead_session(str(tmp_path / "root"), "s")
    assert not left.exists() and not path.exists()
    assert older.exists() and others.exists()


# --- The signals themselves, to a real driver and its local Ray.

def _driver(space: Path, root: Path, ray_tmp: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "shapesweep.sweep.cli", "run", str(space), "--root", str(root),
         "--scheduler", "fifo", "--max-concurrent", "1", "--no-progress"],
        env={**CHILD_ENV, "RAY_TMPDIR": str(ray_tmp)}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for(what, process: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the moment never came"
        time.sleep(0.05)



MOMENTS = {
    # the sweep's options are on disk: its lease is held, Ray not yet started
    "before Ray": lambda root, ray_tmp: (Path(sweep_dir(str(root), "sig")) / "sweep.json").exists(),
    "during ray.init": lambda root, ray_tmp: any((ray_tmp / "ray").glob("session_2*")),
    "during a trial": lambda root, ray_tmp: any(
        (Path(sweep_dir(str(root), "sig")) / "live").glob("*.jsonl")),
}


@pytest.mark.parametrize("signum", ray_session.STOP_SIGNALS, ids=lambda v: v.name)
def test_each_stop_signal_is_held_while_ray_starts_then_interrupts(signum):
    """While Ray starts (`interrupts_held`), Ctrl-C, SIGTERM and SIGHUP alike are held and
    raised as KeyboardInterrupt after it; a second one raises at once. The driver's handlers
    alone tell the signals apart (Ray's processes are in a group of their own, above), so
    one real driver per moment (below) shows the rest."""
    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt), ray_session.interrupts_held():
        os.kill(os.getpid(), signum)
        time.sleep(0)  # the handler runs here: held, not raised
        held = True
    assert held and signal.getsignal(signum) is before  # the handler before it, restored
    reached = []
    with pytest.raises(KeyboardInterrupt), ray_session.interrupts_held():
        os.kill(os.getpid(), signum)
        os.kill(os.getpid(), signum)  # a start that hangs: the second raises here
        reached.append(True)
    assert not reached


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda v: v.name)
def test_sigterm_and_sighup_stop_a_sweep_as_ctrl_c_does(signum):
    """`kill` and a closed terminal raise Ctrl-C's KeyboardInterrupt while a sweep runs."""
    with pytest.raises(KeyboardInterrupt), ray_session.terminate_as_interrupt():
        os.kill(os.getpid(), signum)
        for _ in range(100):  # the handler runs between bytecodes, at once
            time.sleep(0.01)
    assert signal.getsignal(signum) is not ray_session._as_interrupt


@pytest.mark.slow
@pytest.mark.parametrize("signum, moment", [
    (signal.SIGTERM, "before Ray"), (signal.SIGINT, "during ray.init"),
    (signal.SIGHUP, "during a trial")], ids=lambda v: getattr(v, "name", v))
def test_a_signal_to_the_process_group_stops_the_sweep_cleanly(tmp_path, signum, moment):
    """A real driver at each moment, each stopped by another of the signals (that each is
    handled alike at every moment: the unit tests above)."""
    space = write_space(tmp_path, name="sig", search={"n_layers": [1, 2]},
                        train={**TINY_TRAIN, "tokens": 65536})
    root = tmp_path / "root"
    ray_tmp = Path(tempfile.mkdtemp(prefix="ss-sig-"))  # short: Ray's socket paths must fit
    try:
        driver = _driver(space, root, ray_tmp)
        _wait_for(lambda: MOMENTS[moment](root, ray_tmp), driver)
        os.killpg(driver.pid, signum)
        _, err = driver.communicate(timeout=120)
        assert driver.returncode == 130, err[-3000:]
        assert "shapesweep run: interrupted" in err.splitlines(), err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        folder = Path(sweep_dir(str(root), "sig"))
        assert not (folder / "_ray" / SESSION_RECORD).exists()
        assert list((folder / "live").glob("*")) == []  # no live curve left (none if no folder)
        assert list((ray_tmp / "ray").glob("session_2*")) == []
        deadline = time.monotonic() + 30  # Ray's processes were told to stop; give them a moment
        while processes_naming(str(ray_tmp)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_naming(str(ray_tmp)) == []
        catalog = Catalog(default_catalog_url(root))
        assert catalog.lease("sig") is None
        assert catalog.get("sig").status != "running"
    finally:
        for pid in processes_naming(str(ray_tmp)):  # a failed test leaves no Ray behind either
            os.kill(pid, signal.SIGKILL)
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.slow
def test_a_session_folder_left_by_a_sigkill_during_ray_init_is_removed_by_the_next_run(tmp_path):
    space = write_space(tmp_path, name="sig", search={"n_layers": [1]}, train=TINY_TRAIN)
    root = tmp_path / "root"
    ray_tmp = Path(tempfile.mkdtemp(prefix="ss-sig-"))
    try:
        killed = _driver(space, root, ray_tmp)
        _wait_for(lambda: MOMENTS["during ray.init"](root, ray_tmp), killed)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        (left,) = (ray_tmp / "ray").glob("session_2*")
        assert json.loads((ray_storage(str(root), "sig") / SESSION_RECORD).read_text())["pid"] == killed.pid
        again = _driver(space, root, ray_tmp)
        _, err = again.communicate(timeout=300)
        assert again.returncode == 0, err[-3000:]
        assert not left.exists() and list((ray_tmp / "ray").glob("session_2*")) == []
        assert not (ray_storage(str(root), "sig") / SESSION_RECORD).exists()
    finally:
        for pid in processes_naming(str(ray_tmp)):
            os.kill(pid, signal.SIGKILL)
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_the_ray_temp_folder_is_where_a_local_ray_puts_its_sessions(tmp_path):
    """`ray_compat.ray_temp_dir`: $RAY_TMPDIR/ray (as the slow tests above find sessions)."""
    from shapesweep.common import environment

    with environment({"RAY_TMPDIR": str(tmp_path)}):
        assert ray_compat.ray_temp_dir() == str(tmp_path / "ray")
