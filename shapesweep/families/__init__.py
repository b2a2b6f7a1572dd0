"""Model families: one module each (its config, accounting, dashboard text, and the names of
its torch builder and init rules), registered in `shapesweep.families.base`.

This package's `__init__` imports nothing, so the lower layers (`base`, `lm`) can be
imported without registering the built-ins; `shapesweep.search_spaces.configs` registers them.
"""
