"""The option groups' names sweep/search still imports from here; they are declared in
`shapesweep.sweep.options.option_groups`, below the command line (the driver imports them
from there), and this module goes once sweep/search does too."""

from shapesweep.sweep.options.option_groups import (
    DEFAULT_GPU,
    DEFAULT_SEED_SD,
    GPU_KINDS,
    NO_VERDICT_FLAG,
    SCHEDULERS,
)

__all__ = ["DEFAULT_GPU", "DEFAULT_SEED_SD", "GPU_KINDS", "NO_VERDICT_FLAG", "SCHEDULERS"]
