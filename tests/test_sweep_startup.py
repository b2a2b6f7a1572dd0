"""What a sweep pays once before its first trial: the driver never imports torch (seconds
on a small machine; only the trials' workers need it). Nor does it import the tracker
integrations Tune's telemetry would: tests/test_ray_compat.py."""

from __future__ import annotations

import subprocess
import sys

from sweep_helpers import write_space


def test_the_driver_checks_and_sets_up_a_sweep_without_importing_torch(tmp_path):
    space = write_space(tmp_path)
    code = (
        "import sys\n"
        "from shapesweep.sweep.driver import runner, sweep_check, tune_setup\n"
        "from shapesweep.sweep.verbs import run_command\n"
        "run_command._check_resources(runner.SweepOptions(space='x', workers_per_trial=1,\n"
        "                                                 cpus_per_trial=1.0, gpus_per_trial=0.0))\n"
        f"options, checked = sweep_check.check_sweep(runner.SweepOptions(space={str(space)!r},\n"
        f"                                                     root={str(tmp_path / 'sweeps')!r}))\n"
        "tune_setup.run_config(options, checked.name, [])\n"
        "from shapesweep.sweep.driver import progress, trainable\n"
        "assert 'torch' not in sys.modules, 'the driver imported torch'\n")
    subprocess.run([sys.executable, "-c", code], check=True)

