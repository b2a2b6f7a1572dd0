"""sweep.options: the option declarations (one dataclass field per option: its flag, range and whether `sweep.json` keeps it), below the command line and the driver alike."""
