"""What a sweep pays once before its first trial: the driver never imports torch (seconds
on a small machine; only the trials' workers need it), nor the tracker integrations Tune's
telemetry would import."""

from __future__ import annotations

import subprocess
import sys

from sweep_helpers import write_space


def test_the_driver_checks_and_sets_up_a_sweep_without_importing_torch(tmp_path):
    space = write_space(tmp_path)
    code = (
        "import argparse, sys\n"
        "from shapesweep.sweep import run_command, runner\n"
        "run_command._check_resources(argparse.Namespace(workers_per_trial=1, cpus_per_trial=1.0,\n"
        "                                             gpus_per_trial=0.0, address=None,\n"
        "                                             parallel='ddp'))\n"
        f"options, checked = runner._check(runner.SweepOptions(space={str(space)!r},\n"
        f"                                                     root={str(tmp_path / 'sweeps')!r}))\n"
        "runner._run_config(options, [])\n"
        "from shapesweep.sweep import progress, trainable\n"
        "assert 'torch' not in sys.modules, 'the driver imported torch'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_driver_skips_tunes_callback_census_and_the_tracker_imports_it_makes():
    """Tune counts a sweep's callbacks for Ray's telemetry by importing MLflow's and W&B's
    integrations (~1 s); the sweep skips that count. Outside the skip, the count imports
    them: the day Ray stops, this fails and the skip can go."""
    code = (
        "import sys\n"
        "from ray import tune\n"
        "from ray.air._internal import usage\n"
        "from shapesweep.sweep import runner\n"
        "with runner._no_callback_census():\n"
        "    usage.tag_callbacks([tune.Callback()])\n"
        "assert 'ray.air.integrations.mlflow' not in sys.modules, 'counted inside the skip'\n"
        "usage.tag_callbacks([tune.Callback()])\n"
        "assert 'ray.air.integrations.mlflow' in sys.modules, 'Ray no longer imports it to count'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
