"""sweep.cli: the `shapesweep` command (main.py), its verb table and the option declarations."""
