"""shapesweep: iso-budget sweeps over the shape of transformer language models.

The subpackages `shapesweep.sweep`, `.search_spaces`, `.trainers`, `.results` and
`.dashboards` are links (`shapesweep/sweep -> ../sweep`, ...) to the repository's top-level
folders: a module's name is its path under `shapesweep/`, for Python, editors and the type
checker alike, and nothing generic is installed at the top level.
"""
