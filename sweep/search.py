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

What Optuna's own tools read is kept right: every evaluation is reported as an
intermediate value at its token count, a trial ASHA stopped is PRUNED (not COMPLETE with
a short-budget loss), a failed one FAIL, each trial carries the candidate's shape and
accounting columns as user attrs, and the study names its objectives.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from ray.tune.search import BasicVariantGenerator, Searcher

OBJECTIVES = ("params_non_embedding", "flops_per_token")  # second objectives Optuna may trade
MAX_SUGGEST_TRIES = 500  # fresh points asked of Optuna before calling the space exhausted


def trial_id_for(key: str, seed: int, tuned: dict[str, Any] | None = None) -> str:
    from shapesweep.search_spaces.space import tuned_tag

    return f"{key}-t{tuned_tag(tuned)}-s{seed}" if tuned else f"{key}-s{seed}"


def trial_spec(candidate: Any, space: Any, seed: int, data: str | None,
               device: str | None = None, tuned: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config one Ray trial receives (JSON-safe: it travels through Ray and Optuna)."""
    from shapesweep.search_spaces.solver import candidate_document
    from shapesweep.search_spaces.space import tuned_json

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
    """(key, tuned_json, seed): what makes a trial, as `shapesweep.results.store.completed_keys` keys it."""
    return spec["key"], spec["tuned_json"], spec["seed"]


def grid_specs(space: Any, candidates: list, seeds: list[int], data: str | None,
               skip: set[tuple[str, str, int]], device: str | None = None) -> tuple[list[dict], int]:
    """Every planned candidate x tuned combination x seed not in `skip`; also how many in all."""
    specs = [trial_spec(c, space, seed, data, device, tuned)
             for c in candidates for tuned in space.tuned_settings() for seed in seeds]
    return [s for s in specs if trial_triple(s) not in skip], len(specs)


class GridVariants(BasicVariantGenerator):
    """Tune's own grid expansion (what it uses when given no search algorithm), minus the
    state file it saves for an experiment restore, which `resume` never uses (it reads the
    results store): that pickle holds Tune's argparse parser, the interpreter's path with it.
    Returning False is how Tune's own generator skips saving a lazily expanded grid."""

    def save_to_dir(self, dirpath: str, session_str: str) -> bool:
        return False


def open_storage(url: str):
    """An `optuna.storages.RDBStorage`, waiting on a busy SQLite file rather than failing."""
    import optuna

    return optuna.storages.RDBStorage(url, engine_kwargs=(
        {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}))


def study_directions(multi_objective: bool) -> list[str]:
    return ["minimize", "minimize"] if multi_objective else ["minimize"]


def reached_budget(result: dict, budget: int | None) -> bool:
    """Whether a trial's last result is a full-budget one (else ASHA stopped it early); with
    no single budget (per-candidate recipes) only the loop's final report says so."""
    from shapesweep.sweep.trainable import FINAL_FLAG

    if result.get(FINAL_FLAG):
        return True
    return budget is not None and (result.get("tokens") or 0) >= 0.98 * budget


def reconcile_study(study: Any, finished: dict[str, dict]) -> None:
    """Close trials a killed driver left RUNNING: tell the stored result, or FAIL.

    `finished` maps trial_id -> {"status", "values"} from the results store.
    """
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        stored = finished.get(trial.user_attrs.get("trial_id", ""))
        if not stored or stored["status"] == "failed" or None in stored["values"]:
            study.tell(trial.number, state=TrialState.FAIL)
        elif stored["status"] == "stopped_early":  # its evaluations were reported live
            study.tell(trial.number, state=TrialState.PRUNED)
        else:
            study.tell(trial.number, stored["values"])


def launched_count(study: Any) -> int:
    """Trials of the study that ran in Ray to their end or to an ASHA stop (what
    --num-samples counts)."""
    from optuna.trial import TrialState

    return sum(1 for t in study.get_trials(deepcopy=False,
                                           states=(TrialState.COMPLETE, TrialState.PRUNED))
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
        from shapesweep.search_spaces.solver import solve_point

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


class OptunaSearcher(Searcher):
    """Tune searcher over an Optuna study through its public ask/tell: launches only
    feasible, not-yet-evaluated candidates, and files each trial as Optuna's tools expect."""

    def __init__(self, study: Any, define: DefineSpace, metrics: list[str], budget: int | None,
                 storage_url: str):
        super().__init__(metric=metrics[0], mode="min")
        self.study, self.define, self.metrics, self.budget = study, define, metrics, budget
        self.storage_url = storage_url
        self._live: dict[str, Any] = {}  # Tune trial id -> Optuna trial
        self._idents: dict[str, str] = {}  # Tune trial id -> candidate key + tuned
        self._steps: dict[str, set[int]] = {}  # Tune trial id -> token counts reported
        self._known: dict[str, Any] = {}  # candidate key + tuned -> its finished FrozenTrial
        for trial in study.trials:
            key = trial.user_attrs.get("key")
            if key and trial.values is not None and "duplicate_of" not in trial.user_attrs:
                self._known[key + trial.user_attrs.get("tuned_json", "{}")] = trial

    def __getstate__(self) -> dict:
        """Tune pickles its searcher into the run's `tuner.pkl` (for an experiment restore,
        which `resume` never uses: it reads the results store). The study goes as its name
        and its storage URL without the password, never as the storage object, whose URL
        holds it: no credential lands on disk. Trials in flight stay behind."""
        from shapesweep.results.catalog import without_password

        state = {k: v for k, v in self.__dict__.items() if k not in ("study", "_live")}
        return state | {"study": None, "_live": {}, "_study_name": self.study.study_name,
                        "storage_url": without_password(self.storage_url)}

    def __setstate__(self, state: dict) -> None:
        """Reopen the study from its reference; the password comes from the environment
        (PGPASSWORD, ~/.pgpass), as for `resume`."""
        import optuna

        name = state.pop("_study_name")
        self.__dict__.update(state)
        self.study = optuna.load_study(study_name=name, storage=open_storage(self.storage_url))

    def suggest(self, trial_id: str) -> dict | str | None:
        from optuna.trial import TrialState

        for _ in range(MAX_SUGGEST_TRIES):
            trial = self.study.ask()
            config = self.define(trial)
            spec = config["spec"]
            ident = spec and spec["key"] + spec["tuned_json"]
            if spec is None:
                trial.set_user_attr("infeasible", True)
                self.study.tell(trial, state=TrialState.PRUNED)
            elif ident in self._known:
                trial.set_user_attr("duplicate_of", spec["key"])
                self._tell_like(trial, self._known[ident])
            elif ident in self._idents.values():
                trial.set_user_attr("duplicate_of", spec["key"])
                self.study.tell(trial, state=TrialState.PRUNED)
            else:
                self._describe(trial, spec)
                self._live[trial_id], self._idents[trial_id] = trial, ident
                self._steps[trial_id] = set()
                return config
        return Searcher.FINISHED

    @staticmethod
    def _describe(trial: Any, spec: dict) -> None:
        """The candidate's shape and accounting columns and ids, for Optuna's plots."""
        for name, value in spec["row"].items():
            trial.set_user_attr(name, value)
        for name in ("key", "tuned_json", "seed", "trial_id"):
            trial.set_user_attr(name, spec[name])

    def _tell_like(self, trial: Any, known: Any) -> None:
        """File a duplicate as its original ended: the same values, PRUNED where it was."""
        from optuna.trial import TrialState

        if known.state != TrialState.PRUNED:
            self.study.tell(trial, known.values if len(known.values) > 1 else known.values[0])
            return
        if known.last_step is not None:
            trial.report(known.intermediate_values[known.last_step], known.last_step)
        self.study.tell(trial, state=TrialState.PRUNED)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Each evaluation is an intermediate value at its token count (pruning-aware
        samplers read them); Optuna takes none for a multi-objective study."""
        from shapesweep.sweep.trainable import FINAL_FLAG

        trial = self._live.get(trial_id)
        value, tokens = result.get(self.metrics[0]), result.get("tokens")
        if (trial is None or len(self.metrics) > 1 or result.get(FINAL_FLAG)
                or value is None or tokens is None or tokens in self._steps[trial_id]):
            return
        trial.report(float(value), int(tokens))
        self._steps[trial_id].add(tokens)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        from optuna.trial import TrialState

        result = result or {}
        self.on_trial_result(trial_id, result)  # Tune withholds the result ASHA stopped on
        trial = self._live.pop(trial_id, None)
        ident = self._idents.pop(trial_id, None)
        self._steps.pop(trial_id, None)
        if trial is None:
            return
        values = [result.get(m) for m in self.metrics]
        if error or None in values:
            self.study.tell(trial, state=TrialState.FAIL)
            return
        if reached_budget(result, self.budget):
            frozen = self.study.tell(trial, values if len(values) > 1 else values[0])
        else:  # ASHA stopped it: every evaluation is reported above
            frozen = self.study.tell(trial, state=TrialState.PRUNED)
        if frozen.values is not None:
            self._known[ident] = frozen


def make_optuna_search(space: Any, study_name: str, storage_url: str,
                       make_spec: Callable[..., dict], multi_objective: str | None,
                       budget: int | None, sampler: Any) -> tuple[OptunaSearcher, Any]:
    """The searcher over `space` and its (loaded or created) study in `storage_url`.

    `multi_objective` is None, or the second objective (`params_non_embedding` or
    `flops_per_token`) the Optuna `sampler` trades against val_loss.
    """
    import optuna

    metrics = ["val_loss", multi_objective] if multi_objective else ["val_loss"]
    study = optuna.create_study(storage=open_storage(storage_url), study_name=study_name,
                                sampler=sampler,
                                directions=study_directions(bool(multi_objective)),
                                load_if_exists=True)
    if study.metric_names != metrics:  # names the objectives in optuna-dashboard and plots
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metrics)
    searcher = OptunaSearcher(study, DefineSpace(space, make_spec), metrics, budget, storage_url)
    return searcher, study
