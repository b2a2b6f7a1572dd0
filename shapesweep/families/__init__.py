"""Model families: one module each (its config, accounting, dashboard text, and the names of
its torch builder and init rules), listed in `shapesweep.families.base.FAMILY_MODULES`.

This package's `__init__` imports nothing; the registry (`base`) imports the listed modules
the first time it is asked, so no import elsewhere registers anything.
"""
