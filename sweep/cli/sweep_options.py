"""`SweepOptions`, as sweep/search still imports it (types only); it is declared in
`shapesweep.sweep.options.sweep_options`, below the command line (the driver imports it from
there), and this module goes once sweep/search does too."""

from shapesweep.sweep.options.sweep_options import SweepOptions

__all__ = ["SweepOptions"]
