"""sweep: the CLI (`cli/`), one module per verb (`verbs/`), the Ray Tune driver (`driver/`), how
trials are chosen and scheduled (`search/`) and SLURM (`slurm/`); where it sits in the data flow:
docs/architecture.md."""
