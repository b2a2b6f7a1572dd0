"""The code's shape (issue 26): a module long enough to be hard to read whole says why it is
one module, in its docstring; the CLI's verbs each have their own module."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("shapesweep", "sweep", "search_spaces", "trainers", "results", "dashboards")
LONG = 420  # lines (about 400); above this a module's docstring gives its reason


def _modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_a_long_module_says_why_it_is_one():
    unexplained = []
    for path in _modules():
        text = path.read_text()
        if text.count("\n") <= LONG:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "Why one module" not in doc and "over 400 lines" not in doc:
            unexplained.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not unexplained, "split it, or say why it is one module:\n" + "\n".join(unexplained)


def test_each_verb_has_its_own_module():
    from shapesweep.sweep.cli.main import VERBS

    modules = {}
    for verb, spec in VERBS.items():
        modules.setdefault(spec.module, []).append(verb)
    # the pairs that share one job: a sweep and its resumption, a space listed and solved,
    # the static report and the live one
    assert sorted(v for v in modules.values() if len(v) > 1) == [
        ["dashboard", "serve"], ["run", "resume"], ["spaces", "plan"]]


def test_no_private_name_is_imported_from_another_module():
    """A module's `_name` is its own: another module that needs it gets a public name."""
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shapesweep"):
                found += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and a.name != "__version__"]
    assert not found, "\n".join(found)


# The structure figures of issue 54 (benchmarks/structure_figures.py), at most these: today's
# values (after the typed folders and the verbs' typed arguments). Lower one after a merge that
# improves it; none may rise.
STRUCTURE_LIMITS = {
    "imports inside functions": 35,
    "parameters annotated Any": 3,
    "modules over 500 lines": 0,
    "functions over 80 lines": 0,
    ".lm reads outside the families": 0,
}


def _structure_figures() -> dict[str, tuple[int, list]]:
    """Each figure of `structure_figures.count()` with what it counts (empty for a sum)."""
    path = ROOT / "benchmarks" / "structure_figures.py"
    spec = importlib.util.spec_from_file_location("structure_figures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    figures = module.count(ROOT)
    return {"imports inside functions": (figures.imports_inside, []),
            "parameters annotated Any": (figures.any_parameters, []),
            "modules over 500 lines": (len(figures.long_modules), sorted(figures.long_modules)),
            "functions over 80 lines": (len(figures.long_functions), sorted(figures.long_functions)),
            ".lm reads outside the families": (len(figures.lm_reads), figures.lm_reads)}


def test_the_structure_figures_get_no_worse():
    worse = [f"{name}: {value} > {STRUCTURE_LIMITS[name]}" + (f" {what}" if what else "")
             for name, (value, what) in _structure_figures().items()
             if value > STRUCTURE_LIMITS[name]]
    assert not worse, ("worse than STRUCTURE_LIMITS (tests/test_structure.py); improve it, or "
                       "say in the commit why it must rise:\n" + "\n".join(worse))


def _imported(path: Path) -> list[str]:
    """Every module a file imports, wherever it does (top, inside a function, under
    TYPE_CHECKING), relative imports resolved against its package."""
    package = ".".join(("shapesweep", *path.relative_to(ROOT).parent.parts))
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


# Layers below the CLI: they may be imported by sweep/cli and sweep/verbs, never import them.
# (sweep/driver joins this list once it no longer imports them.)
BELOW_THE_CLI = ("sweep/search",)


def test_search_imports_neither_the_cli_nor_the_verbs():
    above = ("shapesweep.sweep.cli", "shapesweep.sweep.verbs", "sweep.cli", "sweep.verbs")
    found = [f"{path.relative_to(ROOT)}: {name}" for folder in BELOW_THE_CLI
             for path in sorted((ROOT / folder).rglob("*.py")) for name in _imported(path)
             if any(name == top or name.startswith(top + ".") for top in above)]
    assert not found, "a layer below the CLI imports it (move what it needs down):\n" + "\n".join(found)
