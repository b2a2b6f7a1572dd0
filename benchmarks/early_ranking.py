"""The early-ranking check of docs/scheduling.md ("Early ranking, named before it runs"): one
sweep run twice, under FIFO and under the noise-aware ASHA, from two stores.

    python benchmarks/early_ranking.py --fifo er-fifo --asha er-asha \\
        --sweep early-ranking-vformer [--markdown] [--resamples 2000] [--replay]

Prints, as the page's protocol names them:

1. tokens trained (cooldown branches included) and wall time, ASHA against FIFO;
2. ASHA's winner (the best mean among the candidates it ran to the end on every seed) against
   FIFO's winner: the paired difference on FIFO's seeds, Holm-adjusted over every candidate's
   comparison with FIFO's winner;
3. Kendall's tau between each rung's cooled ranking and FIFO's final ranking, over the pairs
   FIFO resolves (paired 95% t-interval), at each rung either run evaluated a cooled loss,
   with a 95% seed-bootstrap interval;
4. every miss: a candidate ASHA stopped that FIFO places within noise of its winner after
   adjustment, or ASHA's winner resolved worse than FIFO's after adjustment.

`--replay` adds, as exploration after the fact, ASHA's stop rule replayed on the whole first
rung, at 95% and under Bonferroni, beside FIFO's final verdicts; `--replay-within lr` replays
it with each candidate judged only against those of its own lr.

A candidate is a (key, tuned values) pair, as `status` counts them.
"""

from __future__ import annotations

import argparse
import json
import sys

import lr_transfer  # a sibling script: its Markdown tables
import numpy as np
import pandas as pd

from shapesweep.results.multiplicity import adjusted_p, interval_confidence, paired_p
from shapesweep.results.stats import (
    canonical_tuned_column,
    cooled_column,
    paired_rows,
    resolved_pair_indices,
    verdict_words_of_p,
)
from shapesweep.results.store import load_curves, load_trials
from shapesweep.sweep.search.scheduling import CONFIDENCE, rung_cut

METRIC = "val_loss"


def label(trials: pd.DataFrame) -> pd.Series:
    """One name per candidate: its variant and tuned values (`baseline lr=0.003`)."""
    tuned = [" ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in json.loads(t).items())
             for t in canonical_tuned_column(trials["tuned_json"])]
    return (trials["variant"].astype(str) + " " + pd.Series(tuned, index=trials.index)).str.strip()


def seed_table(trials: pd.DataFrame, value: str = METRIC) -> pd.DataFrame:
    """Candidates x seeds of `value` over completed trials."""
    done = trials[trials["status"] == "completed"]
    return done.assign(candidate=label(done)).pivot_table(index="candidate", columns="seed", values=value,
                                                          aggfunc="mean")


def cost(trials: pd.DataFrame) -> dict[str, float]:
    """Tokens trained (cooldown branches included) and the sweep's wall time: from the first
    trial's start (its finish less its wall time) to the last trial's finish."""
    finished = pd.to_datetime(trials["finished_at"], utc=True)
    started = finished - pd.to_timedelta(trials["wall_time_s"].fillna(0), unit="s")
    return {"trials": len(trials), "stopped": int((trials["status"] == "stopped_early").sum()),
            "tokens": float(trials["tokens"].fillna(0).sum() + trials["cooldown_tokens"].fillna(0).sum()),
            "wall_s": float((finished.max() - started.min()).total_seconds())}


def against_winner(fifo: pd.DataFrame) -> pd.DataFrame:
    """Every candidate against FIFO's winner (lowest seed mean) on FIFO's seeds: mean
    difference, raw and Holm-adjusted p, the adjusted (Bonferroni) interval and a verdict."""
    means = fifo.mean(axis=1)
    winner = means.idxmin()
    others = fifo.drop(index=winner)
    diff = (others - fifo.loc[winner]).to_numpy(float)
    n, mean, sd, low, high = paired_rows(diff)
    p = paired_p(n, mean, sd)
    level = interval_confidence(p, "holm")
    _, _, _, adj_low, adj_high = paired_rows(diff, level)
    p_adj = adjusted_p(p, "holm")
    out = pd.DataFrame({"candidate": others.index, "mean": means.drop(index=winner).to_numpy(),
                        "diff": mean, "ci_low": low, "ci_high": high, "p": p, "p_holm": p_adj,
                        "ci_low_holm": adj_low, "ci_high_holm": adj_high,
                        "verdict": verdict_words_of_p(n, mean, p_adj, METRIC)})
    head = pd.DataFrame([{"candidate": winner, "mean": means[winner], "verdict": "FIFO's winner"}])
    return pd.concat([head, out], ignore_index=True)


def resolved_pairs(fifo: pd.DataFrame) -> list[tuple[str, str]]:
    """The pairs (better, worse) whose paired 95% interval of FIFO's final losses excludes 0."""
    names = list(fifo.index)
    first, second, sign = resolved_pair_indices(fifo.to_numpy(float))
    return [(names[i], names[j]) if s < 0 else (names[j], names[i])
            for i, j, s in zip(first.tolist(), second.tolist(), sign.tolist(), strict=True)]


def tau(rung: pd.DataFrame, final: pd.DataFrame, pairs: list[tuple[str, str]]) -> float:
    """(concordant - swapped) / pairs: each pair's order in the rung's seed means against its
    order in the final seed means (ties count as neither). NaN with no pair present."""
    rung_mean, final_mean = rung.mean(axis=1), final.mean(axis=1)
    score, count = 0, 0
    for a, b in pairs:
        if a not in rung_mean or b not in rung_mean or np.isnan(rung_mean[a]) or np.isnan(rung_mean[b]):
            continue
        count += 1
        score += np.sign(rung_mean[b] - rung_mean[a]) * np.sign(final_mean[b] - final_mean[a])
    return score / count if count else float("nan")


def rung_tables(curves: pd.DataFrame, trials: pd.DataFrame) -> dict[int, pd.DataFrame]:
    """Per rung (tokens below the budget at which a cooled loss was evaluated), the cooled
    loss as candidates x seeds; none for a run without rungs (FIFO's)."""
    column = cooled_column(METRIC)
    if column not in curves:
        return {}
    named = trials.assign(candidate=label(trials))[["trial_id", "candidate", "seed"]]
    points = curves[curves[column].notna() & (curves["tokens"] < trials["tokens"].max())].merge(named, on="trial_id")
    return {int(tokens): at.pivot_table(index="candidate", columns="seed", values=column, aggfunc="mean")
            for tokens, at in points.groupby("tokens")}


def replay_stops(rung: pd.DataFrame, reduction_factor: float = 3.0) -> pd.DataFrame:
    """The noise-aware ASHA's rule (`sweep.search.scheduling.decide`) replayed on a whole rung at
    once: below the rung's `rung_cut`, each candidate, paired with the cut's seeds, is
    stopped at the rule's 95% and under Bonferroni over the m candidates below the cut (at
    1 - 0.05/m). Exploratory: the live rule decides as candidates arrive, on what has
    arrived."""
    alpha = 1 - CONFIDENCE
    cut, below = rung_cut(rung.mean(axis=1).to_dict(), reduction_factor)
    diff = (rung.loc[below] - rung.loc[cut]).to_numpy(float)
    n, mean, sd, _, _ = paired_rows(diff)
    p = paired_p(n, mean, sd)
    return pd.DataFrame({"candidate": below, "cut": cut, "diff": mean, "p": p,
                         "stop_95": (mean > 0) & (p < alpha),
                         "stop_bonferroni": (mean > 0) & (p * len(below) < alpha)})


def group_by_tuned(rung: pd.DataFrame, key: str | None) -> dict[str, pd.DataFrame]:
    """The rung's candidates grouped by the value of tuned `key` in their label (`lr=0.003`);
    one group of all of them without a key."""
    if key is None:
        return {"all": rung}
    values = rung.index.to_series().str.extract(rf"(?:^|\s){key}=(\S+)", expand=False)
    if values.isna().any():
        raise ValueError(f"{', '.join(values[values.isna()].index)} carry no tuned {key}")
    return {value: rung.loc[values == value] for value in values.unique()}


def rung_taus(rungs: dict[int, pd.DataFrame], fifo: pd.DataFrame, pairs: list[tuple[str, str]],
              resamples: int, seed: int = 0) -> pd.DataFrame:
    """Per rung (`rung_tables`; at the budget the cooled loss is the final one): candidates
    there, resolved pairs present, tau, and its
    95% seed-bootstrap interval (the seeds resampled with replacement, the same draw for the
    rung's and the final losses)."""
    columns = ["tokens", "candidates", "pairs", "tau", "low", "high"]
    rng = np.random.default_rng(seed)
    seeds = np.array(fifo.columns)
    rows = []
    for tokens, rung in rungs.items():
        present = [p for p in pairs if p[0] in rung.index and p[1] in rung.index]
        boot = []
        for _ in range(resamples):
            draw = rng.choice(seeds, size=len(seeds), replace=True)
            boot.append(tau(rung.reindex(columns=draw), fifo[draw], present))
        boot = np.array(boot, float)
        low, high = (np.nanpercentile(boot, [2.5, 97.5]) if np.isfinite(boot).any() else (np.nan, np.nan))
        rows.append({"tokens": int(tokens), "candidates": len(rung), "pairs": len(present),
                     "tau": tau(rung, fifo, present), "low": float(low), "high": float(high)})
    return pd.DataFrame(rows, columns=columns)


def report(fifo_root: str, asha_root: str, sweep: str, resamples: int = 2000, replay: bool = False,
           replay_within: str | None = None) -> dict:
    """The four items, and with `replay` (or `replay_within`) the replay of ASHA's first
    rung (None when its run recorded no rungs). A `replay_within` key some candidate lacks
    raises ValueError before the bootstrap runs."""
    fifo_trials, asha_trials = load_trials(fifo_root, [sweep]), load_trials(asha_root, [sweep])
    rungs = {name: rung_tables(load_curves(root, [sweep]), trials)
             for name, root, trials in (("fifo", fifo_root, fifo_trials), ("asha", asha_root, asha_trials))}
    groups = None
    if (replay or replay_within) and rungs["asha"]:
        first = min(rungs["asha"])
        groups = group_by_tuned(rungs["asha"][first], replay_within)
    fifo = seed_table(fifo_trials)
    asha = seed_table(asha_trials)
    full = asha[asha.notna().sum(axis=1) == len(fifo.columns)]
    asha_winner = full.mean(axis=1).idxmin()
    versus = against_winner(fifo)
    winner = versus["candidate"].iloc[0]
    row = versus.set_index("candidate").loc[asha_winner]
    stopped = sorted(set(label(asha_trials[asha_trials["status"] == "stopped_early"])))
    close = set(versus.loc[versus["verdict"] != "worse", "candidate"])
    misses = [f"ASHA stopped {c}, within noise of FIFO's winner after adjustment" for c in stopped if c in close]
    if asha_winner != winner and row["verdict"] == "worse":
        misses.append(f"ASHA's winner {asha_winner} is worse than FIFO's {winner} after adjustment")
    pairs = resolved_pairs(fifo)
    taus = {name: rung_taus(tables, fifo, pairs, resamples) for name, tables in rungs.items()}
    budget = float(fifo_trials["tokens"].max())
    for frame in taus.values():
        frame.insert(1, "budget_fraction", frame["tokens"] / budget)
    return {"sweep": sweep, "cost": {"fifo": cost(fifo_trials), "asha": cost(asha_trials)},
            "fifo_winner": winner, "asha_winner": asha_winner, "versus": versus, "stopped": stopped,
            "resolved_pairs": len(pairs), "candidates": len(fifo), "taus": taus, "misses": misses,
            "replay": None if groups is None else (first, _replay(groups, versus))}


def _replay(groups: dict[str, pd.DataFrame], versus: pd.DataFrame) -> pd.DataFrame:
    """`replay_stops` of each group, beside FIFO's final verdict and Holm p."""
    final = versus.set_index("candidate")[["verdict", "p_holm"]]
    replay = pd.concat([replay_stops(group) for group in groups.values()], ignore_index=True)
    return replay.join(final.add_prefix("fifo_"), on="candidate")


def markdown(frame: pd.DataFrame) -> str:
    return lr_transfer.markdown(frame, number="{:.4g}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fifo", required=True, help="the FIFO run's store root")
    parser.add_argument("--asha", required=True, help="the noise-aware ASHA run's store root")
    parser.add_argument("--sweep", required=True, help="the sweep's name in both stores")
    parser.add_argument("--resamples", type=int, default=2000, help="seed-bootstrap resamples for tau's interval")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    parser.add_argument("--replay", action="store_true",
                        help="also replay ASHA's stop rule on its first rung, at 95%% and under Bonferroni, "
                             "beside FIFO's final verdicts (exploratory)")
    parser.add_argument("--replay-within", metavar="KEY",
                        help="replay (as --replay) with candidates judged only against those with the "
                             "same value of the tuned KEY (e.g. lr), each group its own rung")
    args = parser.parse_args(argv)
    try:
        out = report(args.fifo, args.asha, args.sweep, args.resamples, args.replay, args.replay_within)
    except ValueError as error:
        parser.error(f"--replay-within: {error}")
    show = markdown if args.markdown else (lambda f: f.to_string(index=False))
    fifo, asha = out["cost"]["fifo"], out["cost"]["asha"]
    print(f"# {out['sweep']}: {out['candidates']} candidates, {out['resolved_pairs']} pairs FIFO resolves")
    print(f"1. tokens: ASHA {asha['tokens']:.4g} / FIFO {fifo['tokens']:.4g} = {asha['tokens'] / fifo['tokens']:.3f}; "
          f"wall: ASHA {asha['wall_s']:.0f} s / FIFO {fifo['wall_s']:.0f} s = {asha['wall_s'] / fifo['wall_s']:.3f}; "
          f"ASHA stopped {asha['stopped']} of {asha['trials']} trials")
    print(f"2. FIFO's winner {out['fifo_winner']}; ASHA's winner {out['asha_winner']}")
    print(show(out["versus"]))
    for name, frame in out["taus"].items():
        print(f"3. tau at the cooled rungs of the {name.upper()} run, against FIFO's final ranking")
        print(show(frame) if len(frame) else "none: this run recorded no cooled rungs (a FIFO run has none)")
    print(f"4. stopped by ASHA: {', '.join(out['stopped']) or 'none'}")
    print("misses: " + ("; ".join(out["misses"]) if out["misses"] else "none"))
    if args.replay or args.replay_within:
        if out["replay"] is None:
            print("replay: the ASHA run recorded no cooled rungs")
            return 0
        first, replay = out["replay"]
        within = f", within each {args.replay_within}" if args.replay_within else ""
        print(f"replay (exploratory): ASHA's stop rule on its first rung ({first} tokens), whole rung at once{within}")
        print(show(replay))
    return 0


if __name__ == "__main__":
    sys.exit(main())
