"""What xformer's end-of-trial analysis adds to a `vformer-vs-constant-small` trial, side by side.

For each of the space's ><formers: the analysis (`shapesweep.trainers.analysis.analyse` on the
sequences a trial analyses) against the trial's training steps, both timed on one torch
thread in process time, alternated `--repeats` times; the trial's time is that of
`--steps` training steps scaled to the recipe's 600 (its steps are alike).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_analysis.py [--repeats N] [--steps N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import load_space
from shapesweep.trainers import analysis
from shapesweep.trainers.loop import make_task, train
from shapesweep.trainers.models import build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    space = load_space("vformer-vs-constant-small")
    for candidate in plan(space).candidates:
        if candidate.config.shape == "constant":
            continue
        recipe = space.train_for(candidate=candidate)
        task = make_task(candidate.config, recipe, None, None)[0]
        model = build_model(candidate.config)
        x, y = analysis.sequences(task.val_x, task.val_y, model)
        short = recipe.model_copy(update={"steps": args.steps, "analysis": False})
        shares = []
        for _ in range(args.repeats):
            start = time.process_time()
            analysis.analyse(model, x, y)
            analysed = time.process_time() - start
            start = time.process_time()
            train(candidate.config, short)
            trial = (time.process_time() - start) * recipe.steps / args.steps
            shares.append(analysed / trial)
        print(f"d_model {candidate.config.d_model} L {candidate.config.n_layers}, {x.numel()} tokens: "
              f"the analysis is {statistics.median(shares):.1%} of a {recipe.steps}-step trial "
              f"(median of {args.repeats}; spread {min(shares):.1%}-{max(shares):.1%})")


if __name__ == "__main__":
    main()
