"""sweep.cli: the `shapesweep` command (main.py) and its verb table; the option declarations are sweep.options."""
