"""shapesweep: iso-budget sweeps over the shape of transformer language models.

Installed, the subpackages live under this one name (`shapesweep.sweep`, `.search_spaces`,
`.trainers`, `.results`, `.dashboards`; pyproject's `package-dir` maps the repository's
top-level folders there), so nothing generic is installed at the top level. Run from a
source checkout, those folders sit beside this one, and the path below finds them.
"""

from pathlib import Path

_checkout = Path(__file__).resolve().parent.parent
if not (Path(__file__).resolve().parent / "sweep").is_dir() and (_checkout / "sweep" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # noqa: F821 (a package's __path__)
