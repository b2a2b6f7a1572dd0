"""How fast the vectorised solver prunes 10^6 raw points, vs solving the same points one by one.

Run: .venv/bin/python benchmarks/bench_solver.py [--points 1000000] [--sample 2000]

The space searches d_model x ffn_ratio x k x n_heads and solves n_layers (an integer, so
the budget tolerance prunes hard). Both timings are taken in this one run: the full
`plan()` (vectorised pruning + typed configs and `account()` for the survivors) and
`solve_point()` on a random sample of the same raw points, extrapolated per point.
"""

from __future__ import annotations

import argparse
import random
import time

from shapesweep.search_spaces.solver import plan, solve_point
from shapesweep.search_spaces.space import parse_space


def million_point_space(points: int):
    per_dim = round((points / 8 / 2) ** 0.5)  # d_model x ffn_ratio, times 8 k values, 2 head counts
    doc = {
        "name": "bench-solver",
        "family": "hourglass",
        "budget": {"non_embedding_params": "400M", "tolerance": 0.001},
        "fixed": {"vocab_size": 50304, "activation": "swiglu"},
        "search": {
            "d_model": {"min": 512, "max": 512 + 32 * (per_dim - 1), "step": 32},
            "ffn_ratio": {"min": 0.1, "max": 2.0, "num": per_dim},
            "k": [1, 2, 3, 4, 5, 6, 7, 8],
            "n_heads": [8, 16],
        },
        "solve": "n_layers",
        "constraints": ["width_depth_ratio >= 16", "params_attention <= 2 * params_ffn"],
    }
    return parse_space(doc, file="bench_solver")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=2000)
    args = parser.parse_args()
    space = million_point_space(args.points)
    variant = space.resolved()[0]

    start = time.perf_counter()
    result = plan(space)
    vectorised = time.perf_counter() - start
    raw = result.counts["raw"]

    grid = variant.grid_values()
    rng = random.Random(0)
    sample = [{dim: rng.choice(values) for dim, values in grid.items()} for _ in range(args.sample)]
    start = time.perf_counter()
    found = sum(solve_point(space, point) is not None for point in sample)
    per_point = (time.perf_counter() - start) / len(sample)

    print(result.counts_line())
    print(f"vectorised plan():        {raw} raw points in {vectorised:.2f} s "
          f"({raw / vectorised / 1e6:.2f} M points/s)")
    print(f"solve_point() one by one: {per_point * 1e3:.3f} ms/point -> {per_point * raw:.0f} s "
          f"for {raw} points ({found}/{len(sample)} sampled points feasible)")
    print(f"speedup (one-by-one / vectorised): {per_point * raw / vectorised:.0f}x")


if __name__ == "__main__":
    main()
