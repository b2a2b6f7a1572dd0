"""What a sweep tries: the grid of planned candidates x seeds, or an Optuna search.

A *trial spec* is everything one trial needs and everything its result row needs
besides metrics: the candidate document the trainable trains, the candidate's row
(shape + accounting columns) and its `trial_id` (`KEY-sSEED`, or `KEY-tHASH-sSEED` in a
space with `tune:`, HASH naming the tuned values; so a rerun of the same candidate, tuned
values and seed replaces its row instead of adding one).

Optuna proposes points in the space's declarative `search` dimensions; the solver fills
the free dimensions. A point that cannot meet the budget is told to Optuna as PRUNED
(user attr `infeasible`) inside `suggest`, and Optuna is asked again, so it never reaches
Ray and is never reported as a loss. A point whose candidate was already evaluated in
this study is told the known value (user attr `duplicate_of`) instead of training again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

OBJECTIVES = ("params_non_embedding", "flops_per_token")  # second objectives Optuna may trade
MAX_SUGGEST_TRIES = 500  # fresh points asked of Optuna before calling the space exhausted


def trial_id_for(key: str, seed: int, tuned: dict[str, Any] | None = None) -> str:
    from search_spaces.space import tuned_tag

    return f"{key}-t{tuned_tag(tuned)}-s{seed}" if tuned else f"{key}-s{seed}"


def trial_spec(candidate: Any, space: Any, seed: int, data: str | None,
               device: str | None = None, tuned: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config one Ray trial receives (JSON-safe: it travels through Ray and Optuna)."""
    from search_spaces.solver import candidate_document
    from search_spaces.space import tuned_json

    tuned = tuned or {}
    train = space.train_for(tuned, seed, candidate)
    row = candidate.to_row()
    return {
        "trial_id": trial_id_for(candidate.key, seed, tuned),
        "key": candidate.key,
        "tuned_json": tuned_json(tuned),
        "seed": seed,
        "document": candidate_document(candidate, train),
        "row": row,
        "objectives": {name: row[name] for name in OBJECTIVES if name in row},
        "data": data,
        "device": device,
    }


def trial_triple(spec: dict[str, Any]) -> tuple[str, str, int]:
    """(key, tuned_json, seed): what makes a trial, as `results.store.completed_keys` keys it."""
    return spec["key"], spec["tuned_json"], spec["seed"]


def grid_specs(space: Any, candidates: list, seeds: list[int], data: str | None,
               skip: set[tuple[str, str, int]], device: str | None = None) -> tuple[list[dict], int]:
    """Every planned candidate x tuned combination x seed not in `skip`; also how many in all."""
    specs = [trial_spec(c, space, seed, data, device, tuned)
             for c in candidates for tuned in space.tuned_settings() for seed in seeds]
    return [s for s in specs if trial_triple(s) not in skip], len(specs)


def open_storage(url: str):
    """An `optuna.storages.RDBStorage` (OptunaSearch wants the object, not a URL string)."""
    import optuna

    return optuna.storages.RDBStorage(url, engine_kwargs=(
        {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}))


def study_directions(multi_objective: bool) -> list[str]:
    return ["minimize", "minimize"] if multi_objective else ["minimize"]


def reconcile_study(study: Any, finished: dict[str, dict]) -> None:
    """Close trials a killed driver left RUNNING: tell the stored result, or FAIL.

    `finished` maps trial_id -> {"status", "values"} from the results store.
    """
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        stored = finished.get(trial.user_attrs.get("trial_id", ""))
        if stored and stored["status"] != "failed" and None not in stored["values"]:
            study.tell(trial.number, stored["values"])
        else:
            study.tell(trial.number, state=TrialState.FAIL)


def launched_count(study: Any) -> int:
    """Trials of the study that ran in Ray and completed (what --num-samples counts)."""
    from optuna.trial import TrialState

    return sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
               if "trial_id" in t.user_attrs and "duplicate_of" not in t.user_attrs)


class SpecMaker:
    """candidate -> trial spec for one seed and data path (a class so Tune can pickle it)."""

    def __init__(self, space: Any, seed: int, data: str | None):
        self.space, self.seed, self.data = space, seed, data

    def __call__(self, candidate: Any, tuned: dict[str, Any] | None = None) -> dict:
        return trial_spec(candidate, self.space, self.seed, self.data, tuned=tuned)


class DefineSpace:
    """Optuna define-by-run function: suggest the declarative dims, let the solver do the rest.

    Each `tune:` key is one more categorical parameter (`tune.KEY`).

    A class rather than a closure because Tune pickles the searcher with its experiment state.
    """

    def __init__(self, space: Any, make_spec: Callable[..., dict]):
        self.space, self.make_spec = space, make_spec

    def __call__(self, trial) -> dict[str, Any]:
        from search_spaces.solver import solve_point

        variants = self.space.resolved()
        variant = variants[0]
        if len(variants) > 1:
            name = trial.suggest_categorical("variant", [v.name for v in variants])
            variant = next(v for v in variants if v.name == name)
        prefix = f"{variant.name}." if len(variants) > 1 else ""
        point = {dim: trial.suggest_categorical(prefix + dim, values)
                 for dim, values in variant.grid_values().items()}
        if len(variants) > 1:
            point["variant"] = variant.name
        tuned = {name: trial.suggest_categorical(f"tune.{name}", values)
                 for name, values in self.space.tune.items()}
        candidate = solve_point(self.space, point)
        return {"spec": self.make_spec(candidate, tuned) if candidate is not None else None}


class FeasibleOptunaSearch(OptunaSearch):
    """OptunaSearch that launches only feasible, not-yet-evaluated candidates."""

    def __init__(self, *, study: Any, metric: str | list[str], **kwargs):
        mode = ["min"] * len(metric) if isinstance(metric, list) else "min"
        super().__init__(metric=metric, mode=mode, **kwargs)
        self._known: dict[str, list[float]] = {}  # candidate key + tuned -> objective values
        self._running_keys: set[str] = set()
        self._idents: dict[str, str] = {}  # Tune trial id -> candidate key + tuned
        for trial in study.trials:
            key = trial.user_attrs.get("key")
            if key and trial.values is not None and "duplicate_of" not in trial.user_attrs:
                self._known[key + trial.user_attrs.get("tuned_json", "{}")] = list(trial.values)

    def suggest(self, trial_id: str) -> dict | str | None:
        from optuna.trial import TrialState

        for _ in range(MAX_SUGGEST_TRIES):
            config = super().suggest(trial_id)
            ot_trial = self._ot_trials[trial_id]
            spec = config.get("spec")
            ident = spec and spec["key"] + spec["tuned_json"]
            if spec is None:
                ot_trial.set_user_attr("infeasible", True)
                self._ot_study.tell(ot_trial, state=TrialState.PRUNED)
            elif ident in self._known:
                ot_trial.set_user_attr("duplicate_of", spec["key"])
                values = self._known[ident]
                self._ot_study.tell(ot_trial, values if len(values) > 1 else values[0])
            elif ident in self._running_keys:
                ot_trial.set_user_attr("duplicate_of", spec["key"])
                self._ot_study.tell(ot_trial, state=TrialState.PRUNED)
            else:
                for name in ("key", "tuned_json", "seed", "trial_id"):
                    ot_trial.set_user_attr(name, spec[name])
                self._running_keys.add(ident)
                self._idents[trial_id] = ident
                return config
            del self._ot_trials[trial_id]
        return Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        ot_trial = self._ot_trials.get(trial_id)
        super().on_trial_complete(trial_id, result=result, error=error)
        if ot_trial is None:
            return
        ident = self._idents.pop(trial_id, None)
        self._running_keys.discard(ident)
        metrics = self.metric if isinstance(self.metric, list) else [self.metric]
        values = [(result or {}).get(m) for m in metrics]
        if ident and not error and None not in values:
            self._known[ident] = values


def make_optuna_search(space: Any, study_name: str, storage: Any,
                       make_spec: Callable[..., dict], multi_objective: str | None,
                       sampler_seed: int | None = None) -> tuple[FeasibleOptunaSearch, Any]:
    """The searcher over `space` and its (loaded or created) study.

    `multi_objective` is None, or the second objective (`params_non_embedding` or
    `flops_per_token`) that NSGA-II trades against val_loss.
    """
    import optuna

    if multi_objective:
        sampler = optuna.samplers.NSGAIISampler(seed=sampler_seed)
        metric: str | list[str] = ["val_loss", multi_objective]
    else:
        sampler = optuna.samplers.TPESampler(seed=sampler_seed)
        metric = "val_loss"
    study = optuna.create_study(storage=storage, study_name=study_name, sampler=sampler,
                                directions=study_directions(bool(multi_objective)),
                                load_if_exists=True)
    searcher = FeasibleOptunaSearch(space=DefineSpace(space, make_spec), study=study,
                                    metric=metric, sampler=sampler, study_name=study_name,
                                    storage=storage)
    return searcher, study
