"""Seed-level statistics of a sweep: every comparison with its uncertainty.

Seeds of one model differ by more than most effects the papers report, so a verdict
from one run is noise. Here:

- Seed roles: a space may name `tune.choice_seeds`, the seeds that *choose* each
  candidate's tuned value, apart from the seeds that *measure* it. A trial of a choice seed
  carries `chooses` True (`shapesweep.results.roles.with_seed_roles`); its loss picks the
  value and never enters a mean, interval or verdict. Without choice seeds every trial
  measures, and the value is chosen on the seeds that then measure it (selection bias:
  the best of several noisy means is optimistic).
- `choose_tuned`: from choice trials, per candidate the tuned value whose choice trials
  all completed with the best mean CHOICE_METRIC (the sweep's objective: what the runner
  chose the measure trials by, whatever metric a reader compares).
- `tuned_stats`: per (sweep, key, tuned value) the mean, std (ddof=1) and n over seeds of
  the final metric of completed trials, and `stopped` when a seed of it was stopped early.
  `chosen` marks the candidate's result: the chosen value's measure seeds, none stopped.
  Without choice seeds it is the best mean among the values no seed of which was stopped.
- `candidate_results`: one row per candidate, its result or its `state` saying why it has
  none (stopped, failed, its value still being chosen, trials not run), the seeds missing.
- `compare`: each candidate with a result against the baseline variant: the paired
  difference over the seeds both completed (same seed = same data order), its mean and
  95% t-interval, its p-value, and with the sweep's other comparisons as one family
  (shapesweep.results.multiplicity; Holm by default) the adjusted p-value and interval and
  the verdict: `better` / `worse` when the adjusted p-value is at most 0.05, else `within
  noise` (`verdict_raw`: the raw interval's), with `seeds_for_80pct_power` (paired seeds a
  test at the adjusted level needs at the observed effect, 80% power). Fewer than 2 paired
  seeds, or no result on either side: no verdict, and `no_verdict` says why.
- `exploratory_pairs`: every pair of a sweep's candidates with a result, a second family
  adjusted on its own (exploratory: not the planned comparisons).
  For val_loss, `eval_se` bounds the evaluation's own noise in that difference: over the
  paired seeds, the mean of sqrt(se_c^2 + se_b^2) from each trial's `val_loss_se` (both models
  read the same held-out sequences, so their losses correlate and the difference's standard
  error is smaller; and a fixed set's error is shared by the seeds, so it does not shrink
  with them), and `eval_noise` flags a `better`/`worse` within EVAL_Z x `eval_se` of zero:
  a difference the evaluation set alone could make (evaluate more tokens to settle it).
- `rank_fidelity`: how well a short trial ranks candidates, over the *resolved* pairs
  (pairs whose final paired interval excludes zero; the others cannot be swapped, since
  their order is noise). At each evaluation point that >= 3 candidates share, Kendall's tau
  over those pairs, the pairs, the swapped ones, and the unresolved pairs counted apart;
  `stable_fraction` is the budget fraction from which tau stays >= 0.8 to the end.
- `asha_confirmation`: of ASHA's stop decisions, the fraction a full run confirms. A stopped
  trial is *checkable* when its candidate has a completed trial at the same tuned value (any
  seed); the decision is *confirmed* when that completed mean is outside the top
  ceil(N / reduction_factor) of the sweep's N completed (key, tuned value) means, i.e. ASHA's
  own promotion rule applied to the finals.

This module names the whole inference in one place (callers import from here); each part
lives in a module of one job: `tuned` (seed roles, the chosen value, per-value means),
`paired` (the paired t-interval, verdicts, power), `candidates` (a row per candidate),
`verdicts` (against the baseline, family-adjusted; exploratory pairs; planned ones),
`fidelity` (rank fidelity, ASHA's confirmation) and `per_tuned` (every tuned value).
"""


from __future__ import annotations

from shapesweep.results.candidates import (  # noqa: F401
    RESULT_COLUMNS,
    candidate_results,
)
from shapesweep.results.fidelity import (  # noqa: F401
    asha_confirmation,
    cooled_column,
    cooled_rank_fidelity,
    rank_fidelity,
    stable_fraction,
)
from shapesweep.results.paired import (  # noqa: F401
    PAIR_BLOCK,
    paired_difference,
    paired_rows,
    resolved_pair_indices,
    seeds_for_power,
    verdict_words_of_p,
)
from shapesweep.results.per_tuned import (  # noqa: F401
    PER_TUNED_SIDES,
    per_tuned,
)
from shapesweep.results.tuned import (  # noqa: F401
    BUDGET_GAP,
    CANDIDATE,
    CHOICE_METRIC,
    CONFIDENCE,
    ENDED,
    EVAL_Z,
    FIDELITY_THRESHOLD,
    HIGHER_IS_BETTER,
    MAX_POWER_SEEDS,
    MIN_RANKED,
    POWER,
    ROLE_COLUMN,
    canonical_tuned,
    canonical_tuned_column,
    choose_tuned,
    tuned_stats,
)
from shapesweep.results.verdicts import (  # noqa: F401
    ADJUSTED_COLUMNS,
    MAX_EXPLORATORY_CANDIDATES,
    MAX_LISTED_PAIRS,
    PENDING_VALUES,
    VERDICT_COLUMNS,
    budget_clusters,
    compare,
    exploratory_pairs,
    with_planned,
)

__all__ = [
    "ADJUSTED_COLUMNS",
    "BUDGET_GAP",
    "CANDIDATE",
    "CHOICE_METRIC",
    "CONFIDENCE",
    "ENDED",
    "EVAL_Z",
    "FIDELITY_THRESHOLD",
    "HIGHER_IS_BETTER",
    "MAX_EXPLORATORY_CANDIDATES",
    "MAX_LISTED_PAIRS",
    "MAX_POWER_SEEDS",
    "MIN_RANKED",
    "PAIR_BLOCK",
    "PENDING_VALUES",
    "PER_TUNED_SIDES",
    "POWER",
    "RESULT_COLUMNS",
    "ROLE_COLUMN",
    "VERDICT_COLUMNS",
    "resolved_pair_indices",
    "verdict_words_of_p",
    "asha_confirmation",
    "budget_clusters",
    "candidate_results",
    "canonical_tuned",
    "canonical_tuned_column",
    "choose_tuned",
    "compare",
    "cooled_column",
    "cooled_rank_fidelity",
    "exploratory_pairs",
    "paired_difference",
    "paired_rows",
    "per_tuned",
    "rank_fidelity",
    "seeds_for_power",
    "stable_fraction",
    "tuned_stats",
    "with_planned",
]
