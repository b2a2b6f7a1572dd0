"""The Ray Tune function trainable: one trial = one candidate document trained by the loop.

The loop knows nothing of Ray; this adapter turns its evaluation callback into
`tune.report`, so ASHA sees `val_loss` over `tokens`. When the scheduler stops a
trial, Ray makes `tune.report` raise `SystemExit` in this thread; we turn that into
the loop's own `StopTrial` so it winds down through its documented path.

Imports stay inside the function: the worker imports this module per actor, and a
light module keeps the per-trial overhead small.
"""

from __future__ import annotations

import json
from typing import Any

FINAL_FLAG = "final"  # set on the one report made after the loop returns
LAYERS_FIELD = "layers_json"  # the final report's analysis rows, as JSON text (loggers skip text)


def trial_result_fields(result: Any) -> dict[str, Any]:
    """The scalar fields of a `TrainResult` worth reporting (the curve travels separately),
    and its analysis rows as one JSON text when it has any."""
    fields = result.to_dict()
    fields.pop("curve", None)
    layers = fields.pop("layers", None)
    scalars = {name: value for name, value in fields.items()
               if value is None or isinstance(value, bool | int | float | str)}
    return {**scalars, LAYERS_FIELD: json.dumps(layers)} if layers else scalars


def run_trial(config: dict[str, Any]) -> None:
    """Train `config['spec']['document']` (a candidate document) and report every evaluation."""
    from ray import tune
    from shapesweep.search_spaces.configs import TrainConfig, make_config
    from shapesweep.trainers.loop import StopTrial, train

    spec = config["spec"]
    document = spec["document"]
    model_config = make_config(document["model"] | {"family": document["family"]})
    train_config = TrainConfig(**document["train"])
    # Tagged on every report: the driver files results by trial, and a multi-objective
    # Optuna search reads its second objective from the same report.
    tags = {"trial_key": spec["key"], "seed": spec["seed"], **spec["objectives"]}

    def report(metrics: dict[str, Any]) -> None:
        try:
            tune.report({**metrics, **tags})
        except SystemExit as stop:  # the scheduler stopped this trial
            raise StopTrial("stopped by the scheduler") from stop

    result = train(model_config, train_config, data=spec.get("data"), callback=report,
                   device=spec.get("device"))
    if not result.stopped:
        tune.report({**trial_result_fields(result), **tags, FINAL_FLAG: True})
