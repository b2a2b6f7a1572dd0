"""What a sweep tries: the grid of planned candidates x seeds, or an Optuna search.

A *trial spec* is everything one trial needs and everything its result row needs
besides metrics: the candidate document the trainable trains, the candidate's row
(shape + accounting columns) and its `trial_id` (`KEY-sSEED`, or `KEY-tHASH-sSEED` in a
space with `tune:`, HASH naming the tuned values; so a rerun of the same candidate, tuned
values and seed replaces its row instead of adding one).

Optuna proposes points in the space's declarative `search` dimensions; the solver fills
the free dimensions. The sampler proposes in an in-memory copy of the study (the
*proposer*); only what is new goes into the stored study, each point once: a candidate to
train, or a point that cannot meet the budget (PRUNED, user attr `infeasible`, never
reaching Ray). A point the sampler repeats, or one whose candidate was already trained
(two points can solve to one shape), is told to the proposer alone, so the sampler learns
from it and the stored study holds no duplicate. When the sampler only repeats itself, an
unseen point is drawn at random; once every point has been seen the search ends, however
many samples were asked for.

What Optuna's own tools read is kept right: every evaluation is reported as an
intermediate value at its token count, a trial ASHA stopped is PRUNED (not COMPLETE with
a short-budget loss), a failed one FAIL, each trial carries the candidate's shape and
accounting columns as user attrs, and the study names its objectives.

A little over 400 lines: the grid and the Optuna proposer share the trial-spec
format and its ids, stated once here.
"""

from __future__ import annotations

import itertools
import math
import random
import warnings
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, TypedDict

from ray.tune.search import BasicVariantGenerator, Searcher

from shapesweep.common import UserError
from shapesweep.results.catalog import shown_database, without_password
from shapesweep.results.deadlines import answered, connect_args, db_timeout_s, one_per_thread
from shapesweep.search_spaces.candidates import Row
from shapesweep.search_spaces.recipe_merge import TrainKeys
from shapesweep.search_spaces.solver import Candidate, candidate_document, solve_point
from shapesweep.search_spaces.space import SearchSpace, tuned_json, tuned_tag
from shapesweep.sweep.driver.trainable import FINAL_FLAG

if TYPE_CHECKING:  # optuna is imported where a study is made: a grid sweep never needs it
    import optuna

OBJECTIVES = ("params_non_embedding", "flops_per_token")  # second objectives Optuna may trade
MAX_SUGGEST_TRIES = 500  # points looked at in one `suggest` before Tune is asked to call again
SAMPLER_REPEATS = 16  # seen points the sampler may propose in a row before one is drawn at random
LISTED_POINTS = 100_000  # a space this small lists its unseen points; a larger one draws them


class TrialSpec(TypedDict):
    """One trial's spec (`trial_spec`): what Tune hands the trainable as `config["spec"]`."""

    trial_id: str  # `trial_id_for`
    key: str  # the candidate's config key
    tuned_json: str  # its `tune:` values (`tuned_json`)
    seed: int
    document: dict[str, Any]  # what it trains (`candidate_document`: family, model, train)
    row: Row  # the candidate's shape and accounting columns (`Candidate.to_row`)
    objectives: dict[str, Any]  # the OBJECTIVES columns of `row`
    data: str | None  # the training data's path, or None (built-in)
    device: str | None


def trial_id_for(key: str, seed: int, tuned: TrainKeys | None = None) -> str:
    return f"{key}-t{tuned_tag(tuned)}-s{seed}" if tuned else f"{key}-s{seed}"


def trial_spec(candidate: Candidate, space: SearchSpace, seed: int, data: str | None,
               device: str | None = None, tuned: TrainKeys | None = None) -> TrialSpec:
    """The config one Ray trial receives (JSON-safe: it travels through Ray and Optuna)."""
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


def trial_triple(spec: TrialSpec) -> tuple[str, str, int]:
    """(key, tuned_json, seed): what makes a trial, as `shapesweep.results.store.completed_keys` keys it."""
    return spec["key"], spec["tuned_json"], spec["seed"]


def grid_specs(space: SearchSpace, candidates: list[Candidate], seeds: list[int], data: str | None,
               skip: set[tuple[str, str, int]], device: str | None = None) -> tuple[list[TrialSpec], int]:
    """Every planned candidate x tuned combination x seed not in `skip`; also how many in all."""
    specs = [trial_spec(c, space, seed, data, device, tuned)
             for c in candidates for tuned in space.tuned_settings() for seed in seeds]
    return [s for s in specs if trial_triple(s) not in skip], len(specs)


class GridVariants(BasicVariantGenerator):
    """Tune's own grid expansion (what it uses when given no search algorithm), minus the
    state file it saves for an experiment restore, which `resume` never uses (it reads the
    results store): that pickle holds Tune's argparse parser, the interpreter's path with it.
    Returning False is how Tune's own generator skips saving a lazily expanded grid."""
    def save_to_dir(self, dirpath: str, session_str: str = "default", **kwargs: object) -> bool:
        return False


def open_storage(url: str):
    """An `optuna.storages.RDBStorage` with the database's timeouts (a busy SQLite file is
    waited for rather than failing); its first connect waits at most `db_timeout_s()`,
    in a wait Ctrl-C and SIGTERM end."""
    import optuna


    timeout = db_timeout_s()

    def storage() -> optuna.storages.RDBStorage:
        return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": connect_args(url, timeout)})
    return storage() if one_per_thread(url) else answered(storage, shown_database(url), timeout)


def study_directions(multi_objective: bool) -> list[str]:
    return ["minimize", "minimize"] if multi_objective else ["minimize"]


def reached_budget(result: dict, budget: int | None) -> bool:
    """Whether a trial's last result is a full-budget one (else ASHA stopped it early); with
    no single budget (per-candidate recipes) only the loop's final report says so."""
    if result.get(FINAL_FLAG):
        return True
    return budget is not None and (result.get("tokens") or 0) >= 0.98 * budget


def reconcile_study(study: optuna.Study, finished: dict[str, dict]) -> None:
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


def launched_count(study: optuna.Study, lost: AbstractSet[str] = frozenset()) -> int:
    """Trials of the study that ran in Ray to their end or to an ASHA stop (what
    --num-samples counts), each trial id once; `lost`: trial ids whose results the store
    no longer holds (damaged), which run again."""
    from optuna.trial import TrialState

    return len({t.user_attrs["trial_id"] for t in study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        if "trial_id" in t.user_attrs and "duplicate_of" not in t.user_attrs} - set(lost))


def lost_trials(study: optuna.Study, held: set[str]) -> set[str]:
    """Trial ids the study has finished that the results store does not hold (`held`: the
    ids it does): their results were damaged and set aside, so they run again."""
    from optuna.trial import TrialState

    return {t.user_attrs["trial_id"] for t in study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        if "trial_id" in t.user_attrs and "duplicate_of" not in t.user_attrs} - held


def check_study(study: optuna.Study) -> None:
    """Read every trial of the study as the searcher will (its params, distributions and
    attributes are parsed on reading; a complete trial needs its values), so a damaged table
    is found before any work."""
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False):
        if trial.state == TrialState.COMPLETE and trial.values is None:
            raise ValueError(f"trial {trial.number} is complete without values "
                             "(values should be set for a complete trial)")


def damaged_study(name: str, storage_url: str, error: Exception) -> UserError:
    """The one line for an Optuna study whose tables cannot be read as a study."""
    text = str(error).strip().splitlines()
    problem = f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")
    return UserError(f"the Optuna study {name!r} in it is damaged ({problem}): to repair, delete the "
                     f"study (optuna delete-study --study-name {name} --storage "
                     f"{without_password(storage_url)}); resume then starts it anew, and the results "
                     "store keeps every trial", file=shown_database(storage_url))


class SpecMaker:
    """candidate -> trial spec for one seed and data path (a class so Tune can pickle it)."""
    def __init__(self, space: SearchSpace, seed: int, data: str | None):
        self.space, self.seed, self.data = space, seed, data

    def __call__(self, candidate: Candidate, tuned: TrainKeys | None = None) -> TrialSpec:
        return trial_spec(candidate, self.space, self.seed, self.data, tuned=tuned)


class DefineSpace:
    """Optuna define-by-run function: suggest the declarative dims, let the solver do the rest.

    Each `tune:` key is one more categorical parameter (`tune.KEY`).

    A class rather than a closure because Tune pickles the searcher with its experiment state.
    """

    def __init__(self, space: SearchSpace, make_spec: Callable[..., TrialSpec]):
        self.space, self.make_spec = space, make_spec

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
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


def point_key(params: Mapping[str, object]) -> tuple:
    """A point (Optuna params) as a hashable, order-free key."""
    return tuple(sorted(params.items()))


class Points:
    """Every point `DefineSpace` can propose, as Optuna params: for each variant, its
    dimensions' values and the `tune:` values (a finite set; `size` counts it)."""
    def __init__(self, space: SearchSpace):
        variants = space.resolved()
        tuned = [(f"tune.{name}", list(dict.fromkeys(values))) for name, values in space.tune.items()]
        self.axes: list[list[tuple[str, list]]] = []
        for variant in variants:
            prefix = f"{variant.name}." if len(variants) > 1 else ""
            axes = [("variant", [variant.name])] if len(variants) > 1 else []
            axes += [(prefix + dim, list(dict.fromkeys(values)))
                     for dim, values in variant.grid_values().items()]
            self.axes.append(axes + tuned)
        self.sizes = [math.prod(len(values) for _, values in axes) for axes in self.axes]
        self.size = sum(self.sizes)

    def unseen(self, seen: set[tuple], rng: random.Random) -> dict[str, Any] | None:
        """A point not in `seen`, at random; None when there is none (or, in a space too large
        to list, none turned up in 1000 draws)."""
        if self.size <= LISTED_POINTS:
            left = [params for params in self._every() if point_key(params) not in seen]
            return rng.choice(left) if left else None
        for _ in range(1000):
            (axes,) = rng.choices(self.axes, weights=self.sizes)
            params = {name: rng.choice(values) for name, values in axes}
            if point_key(params) not in seen:
                return params
        return None

    def _every(self) -> Iterator[dict[str, Any]]:
        for axes in self.axes:
            names = [name for name, _ in axes]
            for combo in itertools.product(*(values for _, values in axes)):
                yield dict(zip(names, combo, strict=True))


class OptunaSearcher(Searcher):
    """Tune searcher over an Optuna study through its public ask/tell: launches only
    feasible, not-yet-evaluated candidates, files each point of the space in the study at
    most once, and each trial as Optuna's tools expect (see the module docstring)."""
    def __init__(self, study: optuna.Study, define: DefineSpace, metrics: list[str], budget: int | None,
                 sampler: optuna.samplers.BaseSampler, storage_url: str):
        super().__init__(metric=metrics[0], mode="min")
        self.study, self.define, self.metrics, self.budget = study, define, metrics, budget
        self.storage_url = storage_url
        self.sampler, self.points = sampler, Points(define.space)
        self._proposer: Any = None  # made at the first suggest (a killed run's trials closed by then)
        self._live: dict[str, tuple[Any, Any]] = {}  # Tune trial id -> (Optuna trial, its draft)
        self._idents: dict[str, str] = {}  # Tune trial id -> candidate key + tuned
        self._steps: dict[str, set[int]] = {}  # Tune trial id -> token counts reported
        self._known: dict[str, Any] = {}  # candidate key + tuned -> its finished FrozenTrial
        self._launched: set[str] = set()  # candidate key + tuned of every trial this run started
        self._seen: set[tuple] = set()  # points proposed (FAILed ones may be tried again)
        self._rng = random.Random(0)
        self.lost: set[str] = set()  # trial ids the store lost (`lost_trials`): run them again

    def _start(self) -> None:
        """The proposer: an in-memory study with the stored study's finished trials."""
        import optuna
        from optuna.trial import TrialState

        self._proposer = optuna.create_study(sampler=self.sampler, directions=self.study.directions)
        finished = [t for t in self.study.get_trials(deepcopy=False) if t.state.is_finished()]
        self._proposer.add_trials(finished)
        for trial in finished:
            if trial.user_attrs.get("trial_id") in self.lost:
                continue  # the store lost its results: its point is proposed again
            if trial.state != TrialState.FAIL:
                self._seen.add(point_key(trial.params))
            key = trial.user_attrs.get("key")
            if key and trial.values is not None and "duplicate_of" not in trial.user_attrs:
                self._known[key + trial.user_attrs.get("tuned_json", "{}")] = trial

    def __getstate__(self) -> dict:
        """Tune pickles its searcher into the run's `tuner.pkl` (for an experiment restore,
        which `resume` never uses: it reads the results store). The study goes as its name
        and its storage URL without the password, never as the storage object, whose URL
        holds it: no credential lands on disk. Trials in flight stay behind."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("study", "_live", "_proposer")}
        return state | {"study": None, "_live": {}, "_proposer": None,
                        "_study_name": self.study.study_name,
                        "storage_url": without_password(self.storage_url)}

    def __setstate__(self, state: dict) -> None:
        """Reopen the study from its reference; the password comes from the environment
        (PGPASSWORD, ~/.pgpass), as for `resume`."""
        import optuna

        name = state.pop("_study_name")
        self.__dict__.update(state)
        self.study = optuna.load_study(study_name=name, storage=open_storage(self.storage_url))

    def suggest(self, trial_id: str) -> dict | str | None:  # type: ignore[override]  # Ray's Searcher.suggest returns Searcher.FINISHED (a str), its annotation says Optional[Dict]
        from optuna.trial import TrialState

        if self._proposer is None:
            self._start()
        repeats = 0
        for _ in range(MAX_SUGGEST_TRIES):
            if len(self._seen) >= self.points.size:
                return Searcher.FINISHED  # every point seen: the space is exhausted
            draft = self._draft(random_point=repeats >= SAMPLER_REPEATS)
            if draft is None:
                return Searcher.FINISHED
            config = self.define(draft)
            spec, point = config["spec"], point_key(draft.params)
            ident = spec and spec["key"] + spec["tuned_json"]
            fresh = point not in self._seen
            self._seen.add(point)
            repeats = 0 if fresh else repeats + 1
            if spec is None:
                if fresh:
                    self._file_infeasible(draft.params)
                self._proposer.tell(draft, state=TrialState.PRUNED)
            elif ident in self._known:
                self._tell_like(draft, self._known[ident])
            elif ident in self._launched or not fresh:
                self._proposer.tell(draft, state=TrialState.FAIL)  # running, or failed this run
            else:
                self.study.enqueue_trial(draft.params)
                trial = self.study.ask()
                config = self.define(trial)  # the same point, now in the stored study
                self._describe(trial, config["spec"])
                self._live[trial_id], self._idents[trial_id] = (trial, draft), ident
                self._launched.add(ident)
                self._steps[trial_id] = set()
                return config
        return None  # Tune asks again

    def _draft(self, random_point: bool) -> optuna.Trial | None:
        """The proposer's next trial: the sampler's point, or an unseen one drawn at random
        when the sampler keeps repeating itself; None when no unseen point is left."""
        if random_point:
            params = self.points.unseen(self._seen, self._rng)
            if params is None:
                return None
            self._proposer.enqueue_trial(params)
        return self._proposer.ask()

    def _file_infeasible(self, params: dict[str, object]) -> None:
        """A point that cannot meet the budget, in the stored study once: PRUNED, no values."""
        from optuna.trial import TrialState

        self.study.enqueue_trial(params)
        trial = self.study.ask()
        self.define(trial)
        trial.set_user_attr("infeasible", True)
        self.study.tell(trial, state=TrialState.PRUNED)

    @staticmethod
    def _describe(trial: optuna.Trial, spec: TrialSpec) -> None:
        """The candidate's shape and accounting columns and ids, for Optuna's plots."""
        for name, value in spec["row"].items():
            trial.set_user_attr(name, value)
        for name, value in (("key", spec["key"]), ("tuned_json", spec["tuned_json"]),
                            ("seed", spec["seed"]), ("trial_id", spec["trial_id"])):
            trial.set_user_attr(name, value)

    def _tell_like(self, draft: optuna.Trial, known: optuna.trial.FrozenTrial) -> None:
        """Tell the proposer a repeat as its original ended: the same values, PRUNED where it was."""
        from optuna.trial import TrialState

        if known.state != TrialState.PRUNED:
            self._proposer.tell(draft, known.values if len(known.values) > 1 else known.values[0])
            return
        if known.last_step is not None:
            draft.report(known.intermediate_values[known.last_step], known.last_step)
        self._proposer.tell(draft, state=TrialState.PRUNED)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Each evaluation is an intermediate value at its token count (pruning-aware
        samplers read them); Optuna takes none for a multi-objective study."""
        pair = self._live.get(trial_id)
        value, tokens = result.get(self.metrics[0]), result.get("tokens")
        if (pair is None or len(self.metrics) > 1 or result.get(FINAL_FLAG)
                or value is None or tokens is None or tokens in self._steps[trial_id]):
            return
        for trial in pair:
            trial.report(float(value), int(tokens))
        self._steps[trial_id].add(tokens)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        from optuna.trial import TrialState

        result = result or {}
        self.on_trial_result(trial_id, result)  # Tune withholds the result ASHA stopped on
        pair = self._live.pop(trial_id, None)
        ident = self._idents.pop(trial_id, None)
        self._steps.pop(trial_id, None)
        if pair is None or ident is None:  # the two are filed and dropped together
            return
        (trial, draft), values = pair, [result.get(m) for m in self.metrics]
        told, state = None, None  # Optuna's `tell(trial, values, state)`, None each unless given
        if error or None in values:
            state = TrialState.FAIL
        elif reached_budget(result, self.budget):
            reported = [v for v in values if v is not None]  # every one: none is None here
            told = reported if len(reported) > 1 else reported[0]
        else:  # ASHA stopped it: every evaluation is reported above
            state = TrialState.PRUNED
        frozen = self.study.tell(trial, told, state=state)
        self._proposer.tell(draft, told, state=state)
        if frozen.values is not None:
            self._known[ident] = frozen


def make_optuna_search(space: SearchSpace, study_name: str, storage_url: str,
                       make_spec: Callable[..., TrialSpec], multi_objective: str | None,
                       budget: int | None, sampler: optuna.samplers.BaseSampler) -> tuple[OptunaSearcher, optuna.Study]:
    """The searcher over `space` and its (loaded or created) study in `storage_url`.

    `multi_objective` is None, or the second objective (`params_non_embedding` or
    `flops_per_token`) the Optuna `sampler` trades against val_loss.
    """
    import optuna

    metrics = ["val_loss", multi_objective] if multi_objective else ["val_loss"]
    # The stored study only files points the searcher's proposer chose (enqueued): its own
    # sampler never chooses, so the cheapest one.
    study = optuna.create_study(storage=open_storage(storage_url), study_name=study_name,
                                sampler=optuna.samplers.RandomSampler(),
                                directions=study_directions(bool(multi_objective)),
                                load_if_exists=True)
    if study.metric_names != metrics:  # names the objectives in optuna-dashboard and plots
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metrics)
    searcher = OptunaSearcher(study, DefineSpace(space, make_spec), metrics, budget, sampler,
                              storage_url)
    return searcher, study
