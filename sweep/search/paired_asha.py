"""The noise-aware ASHA: a Tune scheduler that decides per candidate, on its seed mean.

Ray's ASHAScheduler judges each trial alone: one seed's loss at a rung against the rung's
top 1/reduction_factor, so a candidate can lose a seed to noise and its mean then mixes
stopped and completed seeds. Here a candidate (key + tuned values) is judged once all its
seeds in this run have reached the rung, by `shapesweep.sweep.search.scheduling.decide`:

- A trial's first evaluation at or past a rung (the loop evaluates there, saves a
  checkpoint there, and under `decay: wsd` records the cooled loss there) gives its rung
  loss: `val_loss_cooled` when the trial has one, else `val_loss`. Unless it is the last
  of its candidate's seeds to arrive, the trial is PAUSED: Tune keeps the checkpoint it
  reported with that evaluation and frees its worker, and a released trial resumes from
  it bit for bit. This is how Ray's HyperBandScheduler waits for a bracket; pausing, not
  training on, keeps the seeds that arrive first from spending the budget a stop would
  save.
- The last seed to arrive triggers the decision against the candidates already judged at
  that rung (asynchronous, as ASHA). A stopped candidate is stopped whole: the trial
  reporting gets STOP, its paused seeds are stopped through the controller (as
  HyperBandScheduler does), and every seed is filed `stopped_early`. A kept candidate's
  paused seeds are released; `choose_trial_to_run` resumes released trials before
  starting pending ones, so a kept candidate goes on as under ASHA.
- The `baseline` variant is never stopped: every comparison needs it.
- Every decision (the rung, the seeds' losses, the cut, the paired difference and its
  interval, stop or keep) goes to `decisions`, which the driver keeps beside the results
  (DECISIONS_FILE) for `status` to report.
- A seed that ends before a rung (failed) leaves the candidate for that rung, which is
  judged on the seeds that reach it (fewer than two: never stopped). A trial Tune retries
  rejoins when it reports again.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from shapesweep.sweep.driver.sweep_files import DECISIONS_FILE  # noqa: F401 - its name here, as before
from shapesweep.sweep.search.scheduling import Verdict, decide

if TYPE_CHECKING:
    from shapesweep.sweep.search.trials import TrialSpec

CandidateId = tuple[str, str]  # a candidate as this scheduler judges it: (key, tuned_json)


def candidate_of(trial: Trial) -> tuple[CandidateId, int]:
    """((key, tuned_json), seed) of a trial, from its spec (`shapesweep.sweep.search.trials.trial_spec`)."""
    spec = trial.config["spec"]
    return (spec["key"], spec["tuned_json"]), spec["seed"]


class PairedASHA(FIFOScheduler):
    """See the module docstring. `rungs`: token counts, ascending; `expect(specs)` before
    the sweep starts says which seeds each candidate runs."""

    @property
    def supports_buffered_results(self) -> bool:
        return False  # decide on each evaluation as it comes

    def __init__(self, rungs: list[float], reduction_factor: float, baseline: str = "baseline"):
        super().__init__()
        self.decisions: list[dict] = []  # an earlier run's first, on resume (the driver's)
        self.on_decision: Callable[[list[dict]], None] | None = None  # with all, after each
        self.set_search_properties("val_loss", "min")  # Tune's public way to set its metric
        self.rungs, self.reduction_factor, self.baseline = sorted(rungs), reduction_factor, baseline
        self.seeds: dict[CandidateId, set[int]] = defaultdict(set)  # each candidate's seeds in this run
        self.protected: set[CandidateId] = set()  # the baseline's candidates
        self.losses: list[dict[CandidateId, dict[int, float]]] = [defaultdict(dict) for _ in self.rungs]
        self.judged: list[dict[CandidateId, dict[int, float]]] = [{} for _ in self.rungs]
        self.waiting: dict[tuple[CandidateId, int], list[Trial]] = defaultdict(list)
        self.released: set[str] = set()  # trial ids of paused trials to resume
        self.gone: dict[CandidateId, set[int]] = defaultdict(set)  # seeds that ended without a rung
        self.stopped: dict[CandidateId, float] = {}  # candidate -> the rung (tokens) it was stopped at

    def expect(self, specs: list[TrialSpec]) -> None:
        for spec in specs:
            candidate = (spec["key"], spec["tuned_json"])
            self.seeds[candidate].add(spec["seed"])
            if spec["row"].get("variant") == self.baseline:
                self.protected.add(candidate)

    def on_trial_result(self, tune_controller, trial: Trial, result: dict) -> str:
        candidate, seed = candidate_of(trial)
        self.released.discard(trial.trial_id)
        self.gone[candidate].discard(seed)
        if candidate in self.stopped:
            return TrialScheduler.STOP
        loss = result.get("val_loss_cooled")
        loss = result.get("val_loss") if loss is None else loss
        tokens = result.get("tokens")
        if loss is None or tokens is None or not math.isfinite(loss):
            return TrialScheduler.CONTINUE
        rung = next((i for i, at in enumerate(self.rungs)
                     if tokens >= at and seed not in self.losses[i][candidate]), None)
        if rung is None or candidate in self.judged[rung]:
            return TrialScheduler.CONTINUE  # past every rung, or a retry after the decision
        self.losses[rung][candidate][seed] = loss
        if not self._arrived(candidate, rung):
            self.waiting[(candidate, rung)].append(trial)
            return TrialScheduler.PAUSE
        return self._judge(tune_controller, candidate, rung, trial)

    def _arrived(self, candidate: CandidateId, rung: int) -> bool:
        """Every seed of the candidate has a loss at the rung or has ended without one."""
        return self.seeds[candidate] <= set(self.losses[rung][candidate]) | self.gone[candidate]

    def _judge(self, tune_controller, candidate: CandidateId, rung: int, current: Trial | None) -> str:
        """Decide on the candidate at the rung: stop all its seeds or release them; returns
        the action for `current`, the trial reporting (None when a seed's end decided)."""
        losses = self.losses[rung][candidate]
        self.judged[rung][candidate] = losses
        verdict = decide(self.judged[rung], candidate, self.reduction_factor,
                         candidate in self.protected)
        paused = [t for t in self.waiting.pop((candidate, rung), []) if t is not current]
        self._record(candidate, rung, verdict)
        if verdict.stop:
            self.stopped[candidate] = self.rungs[rung]
            for trial in paused:
                if trial.status == Trial.PAUSED or trial.is_saving:
                    tune_controller.stop_trial(trial)
            return TrialScheduler.STOP
        self.released.update(t.trial_id for t in paused)
        return TrialScheduler.CONTINUE

    def _record(self, candidate: CandidateId, rung: int, verdict: Verdict[CandidateId]) -> None:
        (key, tuned), losses = candidate, self.losses[rung][candidate]
        cut = verdict.cut or (None, None)
        self.decisions.append({
            "key": key, "tuned_json": tuned, "rung_tokens": self.rungs[rung],
            "losses": {str(seed): loss for seed, loss in sorted(losses.items())},
            "stop": verdict.stop, "protected": candidate in self.protected,
            "cut_key": cut[0], "cut_tuned_json": cut[1], "delta": verdict.delta,
            "ci_low": verdict.ci_low, "ci_high": verdict.ci_high})
        if self.on_decision is not None:
            self.on_decision(self.decisions)

    def _ended(self, tune_controller, trial: Trial) -> None:
        """A trial ended (completed, stopped, failed): a rung it never reached is judged
        without it, once its candidate's other seeds are there."""
        candidate, seed = candidate_of(trial)
        self.released.discard(trial.trial_id)
        if candidate in self.stopped:
            return
        self.gone[candidate].add(seed)
        for rung in range(len(self.rungs)):
            waiting = (candidate, rung) in self.waiting
            if waiting and candidate not in self.judged[rung] and self._arrived(candidate, rung):
                self._judge(tune_controller, candidate, rung, None)

    def on_trial_complete(self, tune_controller, trial: Trial, result: dict) -> None:
        self._ended(tune_controller, trial)

    def on_trial_error(self, tune_controller, trial: Trial) -> None:
        self._ended(tune_controller, trial)

    def on_trial_remove(self, tune_controller, trial: Trial) -> None:
        self._ended(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller) -> Trial | None:
        """Released trials first (their candidate was kept; they are furthest along), then
        pending ones in the grid's order; never a trial paused for its seeds."""
        trials = tune_controller.get_trials()
        for trial in trials:
            if trial.status == Trial.PAUSED and trial.trial_id in self.released:
                return trial
        for trial in trials:
            if trial.status == Trial.PENDING:
                return trial
        return None

    def debug_string(self) -> str:
        return (f"noise-aware ASHA at {self.rungs} tokens: {len(self.stopped)} candidates "
                f"stopped, {len(self.waiting)} waiting for seeds")
