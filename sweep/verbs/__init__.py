"""sweep.verbs: one module per verb (and the parts of `status`), imported only when it runs."""
