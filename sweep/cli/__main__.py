"""`python -m shapesweep.sweep.cli`: the `shapesweep` command (sweep/cli/main.py)."""

from shapesweep.sweep.cli.main import entry

if __name__ == "__main__":
    entry()
