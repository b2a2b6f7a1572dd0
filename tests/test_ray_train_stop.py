"""Ray Train trials in a sweep's own Ray run without the placement-group cleaner, which
waits on a State API no dashboard serves (`shapesweep.sweep.ray_train_stop`); every other
default callback stays. A real TorchTrainer's callbacks, no Ray started."""

from __future__ import annotations

from ray import train
from ray.train.torch import TorchTrainer
from shapesweep.sweep.ray_train_stop import _cleaner_callback, without_cleaner


def _callbacks(trainer_class) -> list[str]:
    trainer = trainer_class(lambda: None, scaling_config=train.ScalingConfig(num_workers=1))
    return [type(c).__name__ for c in trainer._create_default_callbacks()]


def test_only_the_cleaner_is_left_out():
    cleaner = _cleaner_callback()
    assert cleaner is not None, "this Ray has no PlacementGroupCleanerCallback: revisit the module"
    default, ours = _callbacks(TorchTrainer), _callbacks(without_cleaner(TorchTrainer))
    assert cleaner.__name__ in default
    assert ours == [name for name in default if name != cleaner.__name__]
    assert without_cleaner(TorchTrainer).__name__ == "TorchTrainer"
