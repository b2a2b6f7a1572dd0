"""Schema-valid synthetic sweeps: real configs and exact accounting, modelled losses.

Dashboards are developed, tested and benchmarked on these before (and besides) real
sweeps (test and benchmark data: it is not shipped; benchmarks import it as
`tests.synthetic`). Rows are built by the results' row contract (`TrialRecord`). Every row is a real typed config run through `account()`, so every shape and
accounting column is exactly what a real sweep would record; only the losses are
modelled: a power law in training FLOPs (variable-width bottlenecks reach the same loss
with `VW_FLOP_FRACTION` of the FLOPs, as in the xformer paper), a U-shaped penalty in
log(d_model / n_layers) centred near 150 (hourglass-ffn), a learning-rate penalty around a
width-dependent optimum (so candidates choose different `tune:` values), a noise term
shared by every trial of one seed (same seed = same data order, so seeds pair) plus a
trial's own noise, ASHA-stopped and failed trials. Grid sweeps name one conventional
candidate per budget variant `baseline`, the anchor of `shapesweep.results.stats.compare`.
"""

from __future__ import annotations

import itertools
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from shapesweep.results.rows import TrialRecord
from shapesweep.search_spaces.accounting import account
from shapesweep.search_spaces.configs import TrainConfig, config_key, make_config

LM_FAMILIES = ("conventional", "hourglass", "variable_width")
VW_FLOP_FRACTION = 0.78  # FLOPs a variable-width bottleneck needs for the baseline's loss
_A, _B = 21.2, 0.05  # loss = A * (efficiency * training FLOPs) ** -B
TUNE = {"lr": (2e-3, 6e-3)}  # the `tune:` values every candidate is trained with
BASELINE_RATIO = 64  # the grid's conventional shape nearest this d_model / n_layers is `baseline`


def _round_to(x: float, multiple: int) -> int:
    return max(multiple, int(round(x / multiple)) * multiple)


# The variants a grid sweep crosses with width/depth ratios (hourglass-ffn Fig. 4, xformer Fig. 2).
VARIANTS = {
    "conventional": [{}],
    "hourglass": [{"k": 2, "ffn_ratio": 0.5}, {"k": 4, "ffn_ratio": 0.25}, {"k": 4, "ffn_ratio": 0.5},
                  {"k": 8, "ffn_ratio": 0.25}],
    "variable_width": [{"shape": "bottleneck", "beta": 0.5, "alpha": 0.5},
                       {"shape": "grow", "beta": 0.5, "alpha": 0.5},
                       {"shape": "diamond", "beta": 0.5, "alpha": 1.5}],
}


def _random_variant(family: str, rng: np.random.Generator) -> dict[str, Any]:
    if family == "hourglass":
        return {"k": int(rng.choice([2, 4, 8])), "ffn_ratio": float(rng.choice([0.25, 0.5]))}
    if family == "variable_width":
        shape = str(rng.choice(["bottleneck", "bottleneck", "grow", "shrink", "diamond"]))
        return {"shape": shape, "beta": float(rng.choice([0.25, 0.5, 0.75])),
                "alpha": 1.5 if shape == "diamond" else 0.5}
    return {}


def _lm_config(family: str, budget: float, ratio: float, variant: dict[str, Any]):
    """A config near `budget` non-embedding params with d_model / n_layers near `ratio`."""
    extra = {k: v for k, v in variant.items() if k != "ffn_ratio"}
    k = int(variant.get("k", 0))
    ffn_ratio = float(variant.get("ffn_ratio", 4.0))
    per_layer = 4 + 3 * ffn_ratio * max(k, 1)  # params per layer / d_model^2 (SwiGLU)
    n_layers = max(2, round((budget / (per_layer * ratio**2)) ** (1 / 3)))
    n_heads = max(2, _round_to(ratio * n_layers, 64) // 64)
    d_model = 64 * n_heads
    fields = dict(family=family, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                  d_h=max(8, round(ffn_ratio * d_model)), vocab_size=50304, **extra)
    return make_config(fields)


def _vision_config(budget: float, rng: np.random.Generator):
    """hourglass-mlp: wide-narrow-wide (d_h < d_z) or narrow-wide-narrow (d_h > d_z) MLPs."""
    hourglass = bool(rng.random() < 0.5)
    d_z = int(rng.choice([256, 512, 768, 1024] if hourglass else [64, 128, 192]))
    d_h = int(rng.choice([32, 64, 128])) if hourglass else 4 * d_z
    n_layers = max(1, round(budget / (2 * d_z * d_h)))
    return make_config(dict(family="vision_mlp", d_x=64, d_z=d_z, d_h=d_h, n_layers=n_layers,
                            d_out=64, input_projection="fixed" if hourglass else "trained"))


def _efficiency(config) -> float:
    """How much more a candidate does per FLOP than the conventional baseline (modelled)."""
    if config.family == "hourglass":
        return {2: 0.97, 4: 1.05, 8: 1.12}[config.k]
    if config.family == "variable_width":
        return {"bottleneck": 1 / VW_FLOP_FRACTION, "grow": 1.02, "shrink": 1.04,
                "diamond": 0.94}.get(config.shape, 1.0)
    return 1.0


def _shape_row(config, seq_len: int) -> dict[str, Any]:
    """Every shape and accounting column of a candidate, as a real sweep records them."""
    accounting = account(config, seq_len).to_dict()
    row = {k: v for k, v in config.model_dump().items() if k not in ("width_multiple",)}
    row.update(accounting)
    row["ffn_ratio"] = config.ffn_ratio
    row["width_depth_ratio"] = config.width_depth_ratio
    if config.family == "vision_mlp":
        row["d_model"] = None
    return row


def _variant_name(config) -> str:
    if config.family == "hourglass":
        return f"k{config.k}-r{config.ffn_ratio:g}"
    return str(config.shape) if config.family == "variable_width" else config.family


def _grid(families: tuple[str, ...], budgets: tuple[float, ...], ratios: int) -> list:
    """(config, budget, variant) for every variant x budget x a log grid of width/depth
    ratios (clean U-curves); per budget the conventional shape nearest BASELINE_RATIO is
    the `baseline`."""
    configs, seen = [], set()
    for family in families:
        for variant in VARIANTS.get(family, [{}]):
            for budget in budgets:
                for ratio in np.geomspace(20, 500, ratios):
                    try:
                        config = _lm_config(family, budget, float(ratio), variant)
                    except ValueError:
                        continue
                    if config_key(config) not in seen:
                        seen.add(config_key(config))
                        configs.append([config, budget, _variant_name(config)])
    for budget in budgets:
        conventional = [c for c in configs if c[1] == budget and c[0].family == "conventional"]
        if conventional:
            min(conventional, key=lambda c: abs(math.log(c[0].width_depth_ratio / BASELINE_RATIO)))[2] = "baseline"
    return [tuple(c) for c in configs]


def _candidates(families: tuple[str, ...], budgets: tuple[float, ...], n: int,
                rng: np.random.Generator) -> list:
    """(config, budget, variant) of `n` random shapes near the budgets (no baseline)."""
    configs, seen, attempts = [], set(), 0
    while len(configs) < n and attempts < 50 * n:
        attempts += 1
        family = str(rng.choice(families))
        budget_base = float(rng.choice(budgets))
        budget = budget_base * float(rng.uniform(0.9, 1.1))
        try:
            if family == "vision_mlp":
                config = _vision_config(budget / 100, rng)
            else:
                ratio = float(np.exp(rng.uniform(np.log(16), np.log(512))))
                config = _lm_config(family, budget, ratio, _random_variant(family, rng))
        except ValueError:  # e.g. a width schedule the solver cannot place
            continue
        key = config_key(config)
        if key not in seen:
            seen.add(key)
            configs.append((config, budget_base, _variant_name(config)))
    return configs


def _tuned_points(tune: dict[str, tuple] | None) -> list[dict[str, Any]]:
    """Every combination of the `tune:` values ({} when nothing is tuned)."""
    tune = tune or {}
    return [dict(zip(tune, values, strict=True)) for values in itertools.product(*tune.values())]


def synthetic_sweep(sweep: str, n_trials: int, *, families: tuple[str, ...] = LM_FAMILIES,
                    budgets: tuple[float, ...] = (30e6, 113e6), seeds: int = 3,
                    curve_points: int = 8, seed: int = 0, grid_ratios: int = 0,
                    tune: dict[str, tuple] | None = TUNE) -> list[tuple[dict, list[dict]]]:
    """`n_trials` (trial_row, curve_rows) pairs for `shapesweep.results.store.write_trial`.

    Candidates are random shapes near the budgets, or with `grid_ratios` every LM variant
    at that many width/depth ratios (`n_trials` then caps the grid times the `tune`
    combinations times `seeds`). Every candidate runs every `tune` combination and seed.
    """
    rng = np.random.default_rng(seed)
    tuned = _tuned_points(tune)
    per_candidate = len(tuned) * seeds
    if grid_ratios:
        configs = _grid(families, budgets, grid_ratios)
    else:
        configs = _candidates(families, budgets, math.ceil(n_trials / per_candidate), rng)
    started = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    limit = n_trials if not grid_ratios else min(n_trials, len(configs) * per_candidate)
    for index in range(limit):  # a small random space is repeated with further seeds
        rounds, within = divmod(index, len(configs) * per_candidate)
        config, budget, variant = configs[within // per_candidate]
        rest = within % per_candidate
        trial_seed = rest % seeds + rounds * seeds
        out.append(_trial(sweep, f"t{index:05d}", config, trial_seed, curve_points, rng,
                          started + timedelta(seconds=60 * index), budget=budget, variant=variant,
                          tuned=tuned[rest // seeds],
                          seed_luck=float(np.random.default_rng([seed, trial_seed]).normal(0, 0.01))))
    return out


def _lr_penalty(config, lr: float) -> float:
    """Loss added by a learning rate off a width-dependent optimum (wider models want less)."""
    width = config.d_z if config.family == "vision_mlp" else config.d_model
    best = 4e-3 * (512 / width) ** 0.5
    return 0.02 * math.log(lr / best) ** 2


def _trial(sweep: str, trial_id: str, config, trial_seed: int, points: int,
           rng: np.random.Generator, finished_at: datetime, *, budget: float, variant: str,
           tuned: dict[str, Any], seed_luck: float) -> tuple[dict, list[dict]]:
    vision = config.family == "vision_mlp"
    train = TrainConfig(seq_len=128 if vision else 512, tokens=None if vision else 1,
                        steps=2000 if vision else None, seed=trial_seed)
    row = _shape_row(config, train.seq_len)
    # One token budget per parameter budget: candidates share evaluation points, as in a sweep.
    budget_tokens = 20_000 * 64 if vision else int(20 * budget)
    train = train.model_copy(update={"tokens": None if vision else budget_tokens, **tuned})
    penalty = _lr_penalty(config, train.lr)
    worse = float(rng.random())  # ASHA stops a badly tuned trial more often
    stop = 0.03 + 0.1 + 0.3 * min(1.0, penalty / 0.02)
    status = "failed" if worse < 0.03 else "stopped_early" if worse < stop else "completed"
    status = "completed" if variant == "baseline" else status  # the anchor runs to the end
    done_frac = 1.0 if status == "completed" else float(rng.choice([0.25, 0.5]))
    tokens = np.linspace(budget_tokens / points, budget_tokens, points).astype(np.int64)
    tokens = tokens[: max(1, round(points * done_frac))]  # stopped early: a prefix of the full run
    # Luck lowers the loss: the seed's (shared by its trials), the trial's, each evaluation's,
    # and a candidate's early start that fades by the end (short trials rank imperfectly).
    early = np.random.default_rng(int(config_key(config)[:8], 16)).normal(0, 0.04)
    luck = seed_luck + float(rng.normal(0, 0.004)) - penalty
    luck = luck + rng.normal(0, 0.002, len(tokens)) + early * (1 - tokens / budget_tokens) ** 2
    if vision:  # PSNR grows with log params; wide-narrow-wide designs sit higher (hourglass-mlp)
        bonus = 1.2 if config.d_h < config.d_z else 0.0
        psnr = 12 + 2.2 * np.log10(row["params_total"]) + bonus + 40 * luck
        curve_psnr = psnr - 3.0 * (1 - tokens / budget_tokens) ** 2
        val = 10 ** (-curve_psnr / 10)
    else:
        ratio = config.width_depth_ratio
        u_penalty = 0.035 * np.log(ratio / 150) ** 2
        flops = _efficiency(config) * row["flops_per_token"] * tokens
        val = _A * flops**-_B + u_penalty - luck
        curve_psnr = np.full(len(tokens), np.nan)
    speed = 2e11 / row["flops_per_token"]
    curve = [
        {"step": int(i + 1) * 100, "tokens": int(t), "train_loss": float(v) - 0.02,
         "val_loss": float(v), "lr": 3e-3 * (0.55 + 0.45 * math.cos(math.pi * i / points)),
         "elapsed_s": float(t / speed), "psnr": None if np.isnan(p) else float(p), "ssim": None}
        for i, (t, v, p) in enumerate(zip(tokens, val, curve_psnr, strict=True))
    ]
    failed = status == "failed"
    if failed:
        curve = curve[: points // 3]
    final = curve[-1]
    row.update(variant=variant, budget_error=float(rng.normal(0, 0.004)))
    record = TrialRecord(
        sweep=sweep, trial_id=trial_id, key=config_key(config), seed=trial_seed, status=status,
        candidate=row, budget_tokens=budget_tokens, curve=curve,
        document={"family": config.family,
                  "model": config.model_dump(mode="json", exclude={"family"}),
                  "train": train.model_dump(mode="json")},
        metrics=dict(
            val_loss=None if failed else final["val_loss"],
            best_val_loss=None if failed else min(c["val_loss"] for c in curve),
            val_ppl=None if failed or vision else math.exp(final["val_loss"]),
            train_loss=None if failed else final["train_loss"],
            psnr=None if failed else final["psnr"], ssim=None,
            tokens=final["tokens"], steps=final["step"], wall_time_s=final["elapsed_s"],
            tokens_per_s=speed),
        tuned_json=json.dumps(tuned, sort_keys=True),
        error=f"NonFiniteLoss: loss became nan at step {final['step']}" if failed else None,
        code_version="synthetic", data_hash="synthetic", finished_at=finished_at,
    )
    return record.trial_row(), record.curve_rows()


def write_synthetic(root: str, sweep: str, n_trials: int, **kwargs) -> int:
    """Generate a sweep and write it through the results store; returns trials written."""
    from shapesweep.results.store import write_trial

    trials = synthetic_sweep(sweep, n_trials, **kwargs)
    for trial_row, curve_rows in trials:
        write_trial(root, sweep, trial_row, curve_rows)
    return len(trials)


# The README demo's mean losses (3 seeds of demo-ucurve), per variant.
DEMO_LOSSES = {"baseline": 1.664, "deep": 1.701, "wide": 1.717, "hourglass-wide": 1.735, "hourglass": 1.767}


def write_demo_like(root: str, sweeps: tuple[str, ...] = ("demo-ucurve",)) -> None:
    """Sweeps of demo-ucurve's real candidates (the plan's rows and documents), 3 seeds each,
    the README's losses with seeded noise (each further sweep 0.02 worse), through the store."""
    from shapesweep.results.store import write_trial
    from shapesweep.search_spaces.solver import candidate_document, plan
    from shapesweep.search_spaces.space import load_space

    space, rng = load_space("demo-ucurve"), np.random.default_rng(0)
    for n, sweep in enumerate(sweeps):
        for c in plan(space).candidates:
            for seed in range(3):
                loss = DEMO_LOSSES[c.variant] + 0.02 * n + rng.normal(0, 0.02)
                row = c.to_row() | {
                    "trial_id": f"{c.key}-s{seed}", "seed": seed, "status": "completed", "val_loss": loss,
                    "tokens": 1228800, "wall_time_s": 70.0, "tuned_json": "{}",
                    "config_json": json.dumps(candidate_document(c, space.train_for(seed=seed, candidate=c)))}
                curve = [{"step": s, "tokens": s * 2048, "val_loss": loss + (600 - s) / 300}
                         for s in (100, 300, 600)]
                write_trial(root, sweep, row, curve)
