"""How long a Ray Train run takes to end, with Ray Train's placement-group cleaner and
without it (`shapesweep.sweep.driver.ray_compat.without_placement_group_cleaner`), on a local Ray
without the dashboard (as a sweep starts it). The training function does nothing, so the
time is Ray Train's own: start the controller and one worker, then stop them. The two sides
alternate in one Ray.

    .venv/bin/python benchmarks/bench_train_stop.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def nothing(config: dict) -> None:
    from ray import train

    train.report({"done": 1})


def fit_seconds(trainer_class, folder: str) -> float:
    from ray import train
    from ray.train.torch import TorchConfig

    trainer = trainer_class(nothing, torch_config=TorchConfig(backend="gloo"),
                            scaling_config=train.ScalingConfig(num_workers=1),
                            run_config=train.RunConfig(storage_path=folder))
    start = time.perf_counter()
    trainer.fit()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import ray
    from ray.train.torch import TorchTrainer

    from shapesweep.sweep.driver.ray_compat import without_placement_group_cleaner

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    sides = {"with the cleaner (Ray's default)": TorchTrainer,
             "without it (ray_compat)": without_placement_group_cleaner(TorchTrainer)}
    times: dict[str, list[float]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):
            for name, trainer in sides.items():
                times[name].append(fit_seconds(trainer, folder))
    ray.shutdown()
    for name, seconds in times.items():
        print(f"{name}: median {statistics.median(seconds):.1f} s per run "
              f"({', '.join(f'{s:.1f}' for s in seconds)})")


if __name__ == "__main__":
    main()
