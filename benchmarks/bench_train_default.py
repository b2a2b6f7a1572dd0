"""`shapesweep train`'s default threads against a plain PyTorch loop on the same model, side by
side in one run (issue 55 item 6: >= 0.9x on a quiet machine).

Each run is a fresh process, alternated ABBA (train, plain, plain, train) for `--rounds`:

- train: `python -m shapesweep.sweep.cli train CONFIG --steps N --json` without `--threads`,
  so it trains on the cores free as it starts (`trainers/threads.py` `free_cores`, from a
  short sample of the CPU counters, `busy_cores`); its reported tokens_per_s is the loop's
  own clock.
- plain: the same model (`build_model` of the same config, the recipe's muP init and AdamW
  lr / betas / weight decay), the same batches (the built-in corpus through the loop's own
  task, `make_task`: (seed, step) windows of seq_len, 16 x 128 tokens a step), torch's default
  threads (`torch.get_num_threads()` as the process starts), forward + cross-entropy +
  backward + AdamW step + zero_grad, eager, one forward a step as the loop takes it on CPU.

The two clocks measure the same thing: the loop's tokens_per_s is the tokens of every step
over the wall time (`perf_counter`) of its training intervals, from before the first batch
is built to the last step, evaluations excluded and no warm-up steps excluded (the first
step's one-off costs count on both sides). The plain side times all N steps the same way,
building each batch inside the clock, and has no evaluation to exclude. What differs, and
is the cost of `train` itself: the loop also clips the gradient (`grad_clip` 1.0), steps its
LambdaLR schedule, and keeps each step's loss for its interval's NaN check; it sets its
threads with `torch.set_num_threads` (and as many inter-op threads). The model is the demo
space's baseline candidate (conventional 64 x 4, d_h 256, muP, 2,048-token steps).

    .venv/bin/python benchmarks/bench_train_default.py [--rounds 3] [--steps 60]

Prints one JSON line per run, then one with the median of the rounds' ratios train / plain
(each round's mean train tokens/s over its mean plain tokens/s) and their spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_train_threads import baseline_config

from shapesweep.search_spaces.candidate_file import load_candidate
from shapesweep.trainers.loop import make_task
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure

SHAPESWEEP = [sys.executable, "-m", "shapesweep.sweep.cli"]
# torch's default threads only where nothing in the environment sets them
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
ORDER = ("train", "plain", "plain", "train")  # one ABBA round


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}


def plain_loop(config_path: Path, steps: int) -> dict:
    """The plain side, in this (fresh) process: tokens/s over all `steps` steps."""
    threads = torch.get_num_threads()  # nothing in this process has set them
    config, recipe = load_candidate(config_path)
    task, n_seq, tokens_per_step, _ = make_task(config, recipe, None, None)
    torch.manual_seed(recipe.seed)
    model = build_model(config)
    configure(model, config, recipe)  # the same init; one AdamW group at the recipe's lr
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay,
                                  betas=(recipe.beta1, recipe.beta2))
    model.train()
    losses = []
    started = time.perf_counter()
    for step in range(steps):
        x, y = task.train_batch(step, n_seq)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    last_loss = float(torch.stack(losses)[-1])
    train_time = time.perf_counter() - started
    return {"tokens_per_s": steps * tokens_per_step / train_time, "threads": threads,
            "train_loss_last": last_loss}


def child(command: list[str]) -> dict:
    """Run one side's process; its last stdout line is its JSON summary."""
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=child_env())
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        sys.exit(f"bench_train_default: {' '.join(command[1:4])} failed ({done.returncode}): {tail}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return {**summary, "wall_s": round(time.monotonic() - started, 1)}


def run_side(side: str, config: Path, steps: int) -> dict:
    if side == "train":
        summary = child([*SHAPESWEEP, "train", str(config), "--steps", str(steps), "--json"])
        return {"tokens_per_s": summary["tokens_per_s"], "threads": summary.get("threads"),
                "compiled": summary.get("compiled"), "micro_batch": summary.get("micro_batch_size"),
                "wall_s": summary["wall_s"]}
    return child([sys.executable, __file__, "--plain", str(config), "--steps", str(steps)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive, default=3, help="ABBA rounds, 4 runs each (default 3)")
    parser.add_argument("--steps", type=positive, default=60, help="training steps a run (default 60)")
    parser.add_argument("--plain", type=Path, help=argparse.SUPPRESS)  # the plain side's child
    args = parser.parse_args()
    if args.plain is not None:
        print(json.dumps(plain_loop(args.plain, args.steps)))
        return
    ratios = []
    speeds: dict[str, list[float]] = {"train": [], "plain": []}
    with tempfile.TemporaryDirectory() as folder:
        config = baseline_config(Path(folder))
        for round_ in range(args.rounds):
            runs: dict[str, list[float]] = {"train": [], "plain": []}
            for side in ORDER:
                result = run_side(side, config, args.steps)
                runs[side].append(result["tokens_per_s"])
                print(json.dumps({"round": round_, "side": side, **result,
                                  "tokens_per_s": round(result["tokens_per_s"], 1),
                                  "load_1m": round(os.getloadavg()[0], 2)}), flush=True)
            speeds["train"] += runs["train"]
            speeds["plain"] += runs["plain"]
            ratios.append(statistics.mean(runs["train"]) / statistics.mean(runs["plain"]))
    print(json.dumps({"rounds": args.rounds, "steps": args.steps, "cores": os.cpu_count(),
                      "median_train_over_plain": round(statistics.median(ratios), 3),
                      "min_train_over_plain": round(min(ratios), 3),
                      "max_train_over_plain": round(max(ratios), 3),
                      "train_median_tokens_per_s": round(statistics.median(speeds["train"])),
                      "plain_median_tokens_per_s": round(statistics.median(speeds["plain"]))}))


if __name__ == "__main__":
    main()
