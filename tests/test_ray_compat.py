"""The one door to Ray's internals (`shapesweep.sweep.driver.ray_compat`): no private Ray name,
monkeypatch of Ray or Ray environment setting anywhere else in the package, and for each
workaround a test against the installed Ray that fails the day Ray changes what it relies
on (a private name gone or re-signed, a setting Ray no longer reads). Real Ray, no mocks."""

from __future__ import annotations

import ast
import base64
import contextlib
import functools
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from shapesweep.sweep.driver import ray_compat

pytestmark = pytest.mark.own_ray  # own_ray below: the sweep's own local Ray, in this process
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("shapesweep", "sweep", "trainers", "results", "dashboards", "search_spaces")
DOOR = ROOT / "sweep" / "driver" / "ray_compat.py"
RAY_ENV = re.compile(r"(RAY|TUNE)_[A-Z0-9_]+")
PUBLIC_RAY_ENV = {"RAY_ADDRESS"}  # the user's own setting, read as a CLI default
PRIVATE_PATH = re.compile(r"\bray(\.\w+)*\.(_\w+|tune\.execution)\b")
ATTRIBUTE_CALLS = {"getattr", "hasattr", "setattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _ray_imports(tree: ast.AST) -> dict[str, str]:
    """The names a module binds to Ray, each with what it names: `import ray` (ray),
    `from ray.x import Y` (ray.x.Y), `import ray.x as z` (ray.x)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0]: a.name if a.asname else "ray"
                      for a in node.names if a.name.split(".")[0] == "ray"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray":
            names |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
    return names


def _other_module(node: ast.AST, tree: ast.AST) -> bool:
    """Whether `node` is a module other than Ray's that the file imports (`hasattr(torch,
    "_grouped_mm")` asks torch, not Ray)."""
    modules = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
               for a in n.names if a.name.split(".")[0] != "ray"}
    return isinstance(node, ast.Name) and node.id in modules


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


@functools.cache
def _ray_class(dotted: str) -> type | None:
    module, _, name = dotted.rpartition(".")
    found = getattr(importlib.import_module(module), name, None) if module else None
    return found if isinstance(found, type) else None


@functools.cache
def _ray_private_members(cls: type) -> set[str]:
    """The private names a Ray class and its Ray ancestors define or keep on `self`."""
    names = set()
    for ancestor in cls.__mro__:
        if ancestor.__module__.split(".")[0] == "ray":
            names |= {n for n in vars(ancestor) if _private(n)}
            with contextlib.suppress(OSError, TypeError):
                names |= set(re.findall(r"\bself\.(_\w+)", inspect.getsource(ancestor)))
    return {n for n in names if _private(n)}


@functools.cache
def _private_init_options() -> set[str]:
    """`ray.init`'s private keyword arguments (`_system_config`, `_temp_dir`, ...)."""
    return set(re.findall(r"""kwargs\.(?:pop|get)\(\s*["'](_\w+)""", inspect.getsource(ray.init)))


def _class_names(cls: ast.ClassDef) -> list[tuple[ast.AST, str]]:
    """Every name a class body sets or reaches on itself: its methods and class attributes,
    and each `self.X`."""
    found = []
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((node, node.name))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [(t, t.id) for t in targets if isinstance(t, ast.Name)]
    found += [(n, n.attr) for n in ast.walk(cls) if isinstance(n, ast.Attribute)
              and isinstance(n.value, ast.Name) and n.value.id == "self"]
    return found


def private_ray_uses(path: Path) -> list[str]:
    """Each private Ray use in a file, as `LINE: what`: an import of a private Ray module or
    name; a `_name` reached from a Ray name (and so a Ray attribute assigned: a monkeypatch);
    a private dotted Ray path in a string; a private `ray.init` option; `getattr(x, "_name")`;
    `super()._name`; a subclass of a Ray class touching a private name Ray's class keeps; a
    Ray or Tune environment variable named."""
    tree = ast.parse(path.read_text())
    ray_names, init_options = _ray_imports(tree), _private_init_options()
    found = []

    def note(node: ast.AST, what: str) -> None:
        found.append(f"{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                if module.split(".")[0] == "ray" and PRIVATE_PATH.search(module):
                    note(node, f"imports {module}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray":
                for alias in node.names:
                    if _private(alias.name):
                        note(node, f"imports {alias.name} from {node.module}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root(node)
            if isinstance(root, ast.Name) and root.id in ray_names:
                note(node, f"{root.id}...{node.attr}")
            elif (isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                  and node.value.func.id == "super"):
                note(node, f"super().{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if PRIVATE_PATH.search(node.value):
                note(node, f"names {PRIVATE_PATH.search(node.value).group()}")
            if RAY_ENV.fullmatch(node.value) and node.value not in PUBLIC_RAY_ENV:
                note(node, f"sets or reads {node.value}")
            if node.value in init_options:
                note(node, f"ray.init's {node.value}")
        elif isinstance(node, ast.Call):
            found += [f"{node.lineno}: ray.init's {k.arg}" for k in node.keywords if k.arg in init_options]
            name = getattr(node.func, "id", None)
            if name in ATTRIBUTE_CALLS and len(node.args) > 1 and not _other_module(node.args[0], tree):
                attr = node.args[1]
                if isinstance(attr, ast.Constant) and isinstance(attr.value, str) and _private(attr.value):
                    note(node, f"{name}(..., {attr.value!r})")
        elif isinstance(node, ast.ClassDef):
            bases = [_ray_class(ray_names[b.id]) for b in node.bases
                     if isinstance(b, ast.Name) and b.id in ray_names]
            kept = set().union(*(_ray_private_members(b) for b in bases if b is not None))
            for inner, name in _class_names(node):
                if name in kept:
                    note(inner, f"{name} (kept by {node.name}'s Ray base)")
    return found


def test_private_ray_names_are_used_only_in_ray_compat():
    outside = {str(path.relative_to(ROOT)): uses for package in PACKAGES
               for path in sorted((ROOT / package).rglob("*.py"))
               if path != DOOR and (uses := private_ray_uses(path))}
    assert outside == {}, "private Ray uses outside sweep/driver/ray_compat.py"


def test_the_scan_finds_each_kind_of_private_use_in_the_door(tmp_path):
    """The scan can fail: in ray_compat it finds every kind of use the door holds."""
    uses = "\n".join(private_ray_uses(DOOR))
    for expected in ("ray..._private", "names ray.air._internal", "imports ray._private",
                     "imports ray.train.v2._internal", "ray.init's _system_config",
                     "super()._create", "sets or reads TUNE_DISABLE_SIGINT_HANDLER",
                     "getattr(..., '_global_node')"):
        assert expected in uses, (expected, uses)
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import ray\nfrom ray.tune.logger import TBXLoggerCallback as Base\n"
        "from ray.tune.schedulers import FIFOScheduler\n"
        "class T(Base):\n    def f(self, trial):\n"
        "        self._mine = 1\n        return self._mine, self._trial_writer[trial]\n"
        "class S(FIFOScheduler):\n    _supports_buffered_results = False\n"
        "ray.tune._usage = None\nray.init(_system_config={})\n")
    uses = "\n".join(private_ray_uses(sample))
    assert "_trial_writer (kept by T's" in uses and "_mine" not in uses
    assert "_supports_buffered_results (kept by S's" in uses
    assert "ray..._usage" in uses and "ray.init's _system_config" in uses


# Environment settings: each one a name Ray still reads, and the two that shape a sweep's
# files and output seen taking effect.

def _ray_reads(name: str) -> list[str]:
    """The files of the installed Ray (tests and examples aside) that read `name` from the
    environment."""
    read = re.compile(rf"""(environ\.get|getenv|environ\[|env_bool|env_integer|env_float)\(?\s*["']{name}["']""")
    folder = Path(ray.__file__).parent
    return [str(path.relative_to(folder)) for path in folder.rglob("*.py")
            if not {"tests", "examples", "rllib"} & set(path.parts)
            and name in (text := path.read_text(errors="replace")) and read.search(text)]


@pytest.mark.parametrize("name", sorted(ray_compat.QUIET_ENV))
def test_ray_still_reads_each_setting(name):
    assert _ray_reads(name), f"Ray {ray.__version__} no longer reads {name}: revisit QUIET_ENV"


def test_tune_adds_no_loggers_of_its_own_when_told(monkeypatch):
    from ray.tune.utils.callback import _create_default_callbacks

    def loggers() -> set[str]:
        return {type(c).__name__ for c in _create_default_callbacks([], metric=None)
                if type(c).__name__.endswith("LoggerCallback")}

    monkeypatch.delenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", raising=False)
    assert "TBXLoggerCallback" in loggers()
    with ray_compat.quiet_environment():
        assert loggers() == set()


def test_tune_prints_no_new_output_when_told(monkeypatch):
    from ray.tune.experimental.output import get_air_verbosity

    monkeypatch.delenv("RAY_AIR_NEW_OUTPUT", raising=False)
    assert get_air_verbosity(1) is not None
    with ray_compat.quiet_environment():
        assert get_air_verbosity(1) is None


def test_ray_reads_log_deduplication_when_it_is_imported():
    """Why quiet_environment says RAY_DEDUP_LOGS reaches only processes started after it."""
    code = "import ray._private.ray_constants as c; print(c.RAY_DEDUP_LOGS)"
    env = {**os.environ, "RAY_DEDUP_LOGS": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_the_settings_are_the_users_where_set_and_undone_after(monkeypatch):
    monkeypatch.setenv("RAY_DEDUP_LOGS", "1")
    monkeypatch.delenv("TUNE_DISABLE_SIGINT_HANDLER", raising=False)
    with ray_compat.quiet_environment():
        assert os.environ["RAY_DEDUP_LOGS"] == "1" and os.environ["TUNE_DISABLE_SIGINT_HANDLER"] == "1"
    assert os.environ["RAY_DEDUP_LOGS"] == "1" and "TUNE_DISABLE_SIGINT_HANDLER" not in os.environ


def test_tune_installs_its_sigint_handler_unless_told(monkeypatch):
    """Where each `Tuner.fit` installs its Ctrl-C handler (so no earlier import matters)."""
    import signal

    from ray.tune.tune import _setup_signal_catching

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGUSR1)}
    try:
        monkeypatch.delenv("TUNE_DISABLE_SIGINT_HANDLER", raising=False)
        _setup_signal_catching()
        assert signal.getsignal(signal.SIGINT) is not saved[signal.SIGINT]
        signal.signal(signal.SIGINT, saved[signal.SIGINT])
        with ray_compat.quiet_environment():
            _setup_signal_catching()
        assert signal.getsignal(signal.SIGINT) is saved[signal.SIGINT]
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


# A sweep's own local Ray, as `ray_session.init_ray` starts it.

@pytest.fixture(scope="module")
def own_ray():
    context = ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                       logging_level="ERROR", **ray_compat.without_prestarted_workers())
    yield context.address_info["session_dir"]
    ray.shutdown()


def _processes(needle: str) -> dict[int, str]:
    """This user's processes whose command line holds `needle`: pid -> command line."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in line and entry.stat().st_uid == os.getuid():
            found[int(entry.name)] = line
    return found


def test_a_local_ray_starts_without_prestarted_workers(own_ray):
    """Ray's GCS gets the key, and runs (an unknown key stops it: `ray.init` then fails)."""
    (gcs,) = [line for line in _processes(own_ray).values() if "gcs_server " in line]
    config = json.loads(base64.b64decode(re.search(r"--config_list=(\S+)", gcs).group(1)))
    assert config["prestart_worker_first_driver"] is False
    assert ray.cluster_resources()["CPU"] == 2


def test_the_autoscaler_monitor_is_killed_before_shutdown(own_ray):
    def monitors() -> list[int]:
        return [pid for pid, line in _processes(own_ray).items() if "autoscaler/_private/monitor.py" in line]

    assert monitors(), "no monitor in this Ray"
    assert ray_compat.kill_autoscaler_monitor()
    deadline = time.monotonic() + 30
    while monitors() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert monitors() == []
    assert ray.is_initialized() and ray.cluster_resources()["CPU"] == 2  # the rest runs on


def _trial(tmp_path):
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial

    storage = StorageContext(storage_path=str(tmp_path), experiment_dir_name="exp",
                             trial_dir_name="t1")
    return Trial("__fake", config={"lr": 0.1}, stub=True, trial_id="t1", storage=storage)


def test_mlflow_run_id_is_the_run_ray_opened(own_ray, tmp_path, monkeypatch):
    from mlflow import MlflowClient
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    # the callback's setup sets MLflow's process-wide tracking URI: put it back after the test
    monkeypatch.setattr("mlflow.tracking._tracking_service.utils._tracking_uri", None)
    uri = (tmp_path / "mlruns").as_uri()
    callback = MLflowLoggerCallback(tracking_uri=uri, experiment_name="compat")
    callback.setup()
    trial = _trial(tmp_path)
    callback.log_trial_start(trial)
    run = MlflowClient(uri).get_run(ray_compat.mlflow_run_id(callback, trial))
    assert run.data.params == {"lr": "0.1"} and run.info.run_name == str(trial)


def test_wandb_logging_is_whether_ray_started_a_logging_actor(own_ray, tmp_path, monkeypatch):
    from ray.air.integrations.wandb import WandbLoggerCallback

    monkeypatch.setenv("WANDB_MODE", "offline")
    callback = WandbLoggerCallback(project="compat", mode="offline", dir=str(tmp_path))
    callback.setup()
    trial = _trial(tmp_path)
    assert not ray_compat.wandb_logging(callback, trial)
    callback.log_trial_start(trial)
    assert ray_compat.wandb_logging(callback, trial)
    callback.log_trial_end(trial)


@pytest.mark.slow
def test_wandb_files_written_keeps_a_run_file_whole_when_ray_ends_its_actor(own_ray, tmp_path,
                                                                          monkeypatch):
    """Ray ends a trial's W&B actor (and wandb-core with it) the moment `wandb.finish`
    returns, which is before wandb-core writes the run's file (W&B 0.31): under load
    (`tests/test_trackers.py`, load 4) a run's file was left as its 7-byte header. With
    `wandb_files_written` the actor waits for the file, so it holds the run here at once."""
    from ray.air.integrations.wandb import WandbLoggerCallback

    monkeypatch.setenv("WANDB_MODE", "offline")
    callback = ray_compat.wandb_files_written(type("Callback", (WandbLoggerCallback,), {}))(
        project="compat", mode="offline", dir=str(tmp_path))
    callback.setup()
    trial = _trial(tmp_path)
    Path(trial.local_path).mkdir(parents=True)  # the actor works there
    callback.log_trial_start(trial)
    callback.log_trial_result(1, trial, {"val_loss": 2.5, "training_iteration": 1})
    callback.log_trial_end(trial)
    callback.on_experiment_end([trial])  # waits for the actor's `run`, then kills it
    (run_file,) = tmp_path.glob("wandb/offline-run-*/*.wandb")
    assert str(trial).encode() in run_file.read_bytes()


def test_tensorboard_writer_is_the_one_ray_opened(own_ray, tmp_path):
    from ray.tune.logger import TBXLoggerCallback
    from tensorboardX import SummaryWriter

    callback, trial = TBXLoggerCallback(), _trial(tmp_path)
    assert ray_compat.tensorboard_writer(callback, trial) is None
    callback.log_trial_start(trial)
    writer = ray_compat.tensorboard_writer(callback, trial)
    assert isinstance(writer, SummaryWriter) and writer.logdir == trial.local_path
    callback.log_trial_end(trial)


def test_a_cluster_token_is_sent_as_ray_start_would(tmp_path):
    """A token in RAY_AUTH_TOKEN turns token auth on; none, or RAY_AUTH_MODE=disabled, not."""
    code = ("from ray._private.authentication.authentication_utils import is_token_auth_enabled\n"
            "from shapesweep.sweep.driver import ray_compat\n"
            "assert not is_token_auth_enabled()\n"
            "ray_compat.use_cluster_token()\n"
            "print(is_token_auth_enabled())\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"HOME": str(tmp_path)}
    token = {"RAY_AUTH_TOKEN": "0123456789abcdef" * 2}

    def enabled(env: dict) -> str:
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=True).stdout.strip()

    assert enabled(base | token) == "True"
    assert enabled(base) == "False"
    assert enabled(base | token | {"RAY_AUTH_MODE": "disabled"}) == "False"


def test_tunes_callback_census_is_skipped_and_tune_calls_it_where_it_is_patched():
    """Tune counts a sweep's callbacks for Ray's telemetry by importing MLflow's and W&B's
    integrations (~1 s); the sweep skips that count. Outside the skip, the count imports
    them: the day Ray stops, this fails and the skip can go. Tune calls the count through
    the module the skip patches."""
    code = (
        "import sys\n"
        "from ray import tune\n"
        "from ray.air._internal import usage\n"
        "from shapesweep.sweep.driver import ray_compat\n"
        "with ray_compat.no_callback_census():\n"
        "    usage.tag_callbacks([tune.Callback()])\n"
        "assert 'ray.air.integrations.mlflow' not in sys.modules, 'counted inside the skip'\n"
        "usage.tag_callbacks([tune.Callback()])\n"
        "assert 'ray.air.integrations.mlflow' in sys.modules, 'Ray no longer imports it to count'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    from ray.air._internal import usage
    from ray.tune import tune

    assert tune.air_usage is usage and "air_usage.tag_callbacks(" in inspect.getsource(tune.run)
    assert list(inspect.signature(usage.tag_callbacks).parameters) == ["callbacks"]


def _callbacks(trainer_class) -> list[str]:
    from ray import train

    trainer = trainer_class(lambda: None, scaling_config=train.ScalingConfig(num_workers=1))
    return [type(c).__name__ for c in trainer._create_default_callbacks()]


def test_only_the_placement_group_cleaner_is_left_out():
    """A real TorchTrainer's default callbacks, no Ray started."""
    from ray.train.torch import TorchTrainer

    cleaner = ray_compat.placement_group_cleaner()
    assert cleaner is not None, "this Ray has no PlacementGroupCleanerCallback: revisit ray_compat"
    ours = ray_compat.without_placement_group_cleaner(TorchTrainer)
    default = _callbacks(TorchTrainer)
    assert cleaner.__name__ in default
    assert _callbacks(ours) == [name for name in default if name != cleaner.__name__]
    assert ours.__name__ == "TorchTrainer"
