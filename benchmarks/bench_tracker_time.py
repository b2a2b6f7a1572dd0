"""What experiment trackers cost a sweep, and whether a trial's own times leave it out.

    .venv/bin/python -m benchmarks.bench_tracker_time [--repeats 2] [--tokens 16384]

The same tiny sweep (a conventional LM at 2 depths, FIFO, one trial at a time) runs in fresh
`shapesweep run` processes without trackers and with `--log-to mlflow --log-to tensorboard`
(MLflow on a SQLite store in a temporary folder), side by side, order alternated between
repeats. Printed per side: the sweep's wall time (the command's), and the mean over trials
of the stored `wall_time_s` and `tokens_per_s`. Trackers log in the driver while the trial
waits on it (Tune's reporting is synchronous), so the sweep takes longer with them; a
trial's stored times should not (ratio near 1, within the machine's noise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

TRACKERS = ["--log-to", "mlflow", "--log-to", "tensorboard"]


def space(tokens: int) -> dict:
    return {
        "name": "bench-trackers", "family": "conventional",
        "budget": {"non_embedding_params": 30912, "tolerance": 0.02},
        "fixed": {"d_model": 32, "n_heads": 2, "vocab_size": 256, "activation": "swiglu"},
        "search": {"n_layers": [1, 2]}, "solve": "d_h",
        "train": {"tokens": tokens, "seq_len": 32, "batch_tokens": 512, "lr": 3.0e-3,
                  "eval_tokens": 2048},
    }


def one_sweep(folder: Path, tokens: int, tracked: bool) -> dict:
    """Run the sweep in a fresh process; its wall time and the trials' stored times."""
    from shapesweep.results.store import load_trials

    root = folder / ("tracked" if tracked else "plain")
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(space(tokens)))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"}
    command = [sys.executable, "-m", "shapesweep.sweep.cli", "run", str(path), "--root", str(root),
               "--scheduler", "fifo", "--max-concurrent", "1", "--no-progress",
               *(TRACKERS if tracked else [])]
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, capture_output=True)
    wall = time.perf_counter() - start
    trials = load_trials(str(root), ["bench-trackers"])
    return {"sweep_s": wall, "trial_s": trials["wall_time_s"].mean(),
            "tokens_per_s": trials["tokens_per_s"].mean()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16384)
    args = parser.parse_args()
    sides: dict[bool, list[dict]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="bench-trackers-") as tmp:
        for repeat in range(args.repeats):
            for tracked in ((False, True) if repeat % 2 == 0 else (True, False)):
                folder = Path(tmp) / f"r{repeat}"
                folder.mkdir(exist_ok=True)
                sides[tracked].append(one_sweep(folder, args.tokens, tracked))
    print(f"{args.repeats} repeats, 2 trials each, {args.tokens} tokens a trial")
    for name in ("sweep_s", "trial_s", "tokens_per_s"):
        plain, tracked = ([run[name] for run in sides[side]] for side in (False, True))
        ratio = statistics.mean(tracked) / statistics.mean(plain)
        print(f"{name:>13}: none {statistics.mean(plain):9.2f}  mlflow+tensorboard "
              f"{statistics.mean(tracked):9.2f}  ratio {ratio:.2f}  (per repeat: none "
              f"{', '.join(f'{v:.2f}' for v in plain)}; tracked {', '.join(f'{v:.2f}' for v in tracked)})")


if __name__ == "__main__":
    main()
