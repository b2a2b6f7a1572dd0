"""`python -m shapesweep.sweep.slurm`: the batch script's path, to copy the script or give it
to `sbatch` as it is (`sbatch PATH SPACE [run options]`; docs/cluster.md)."""

from __future__ import annotations

import sys

from shapesweep.sweep.slurm import script_path

if __name__ == "__main__":
    if sys.argv[1:]:
        sys.exit("usage: python -m shapesweep.sweep.slurm (prints the path of the SLURM batch script)")
    print(script_path())
