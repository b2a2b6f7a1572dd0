"""The structure figures issue 54 counts, from the AST of the package folders.

    python benchmarks/structure_figures.py [CHECKOUT]

Internal imports made inside functions, parameters annotated with `Any`, modules over 500
lines, functions over 80, and reads of `.lm` outside `shapesweep/families/`.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("shapesweep", "sweep", "search_spaces", "trainers", "results", "dashboards")
LONG_MODULE = 500  # lines
LONG_FUNCTION = 80  # lines


@dataclass
class Figures:
    imports_inside: int = 0
    imports_top: int = 0
    any_parameters: int = 0
    long_modules: list[tuple[int, str]] = field(default_factory=list)
    long_functions: list[tuple[int, str]] = field(default_factory=list)
    lm_reads: list[str] = field(default_factory=list)


def modules(root: Path) -> list[Path]:
    """The package's own files (shapesweep/'s links to the top-level folders are not walked)."""
    found = {path.resolve() for package in PACKAGES for path in (root / package).rglob("*.py")}
    return sorted(path.relative_to(root.resolve()) for path in found)


def is_internal(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] in PACKAGES
    return any(alias.name.split(".")[0] in PACKAGES for alias in node.names)


def inside_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return True
    return False


def count(root: Path) -> Figures:
    figures = Figures()
    for path in modules(root):
        name = str(path)
        text = (root / path).read_text()
        if text.count("\n") > LONG_MODULE:
            figures.long_modules.append((text.count("\n"), name))
        tree = ast.parse(text)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and is_internal(node):
                if inside_function(node, parents):
                    figures.imports_inside += 1
                else:
                    figures.imports_top += 1
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONG_FUNCTION:
                    figures.long_functions.append((lines, f"{name}:{node.name}"))
                arguments = node.args
                every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                         *(a for a in (arguments.vararg, arguments.kwarg) if a)]
                figures.any_parameters += sum(
                    1 for a in every if a.annotation is not None and "Any" in ast.unparse(a.annotation))
            elif isinstance(node, ast.Attribute) and node.attr == "lm" and "families" not in name:
                figures.lm_reads.append(f"{name}:{node.lineno}")
    return figures


def main() -> None:
    figures = count(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
    internal = figures.imports_inside + figures.imports_top
    print(f"internal imports inside functions: {figures.imports_inside} of {internal} "
          f"({100 * figures.imports_inside / max(1, internal):.0f}%)")
    print(f"parameters annotated Any: {figures.any_parameters}")
    print(f"modules over {LONG_MODULE} lines: {len(figures.long_modules)}",
          sorted(figures.long_modules, reverse=True))
    print(f"functions over {LONG_FUNCTION} lines: {len(figures.long_functions)}",
          sorted(figures.long_functions, reverse=True))
    files = {site.split(":")[0] for site in figures.lm_reads}
    print(f".lm read outside shapesweep/families/: {len(figures.lm_reads)} sites in {len(files)} files")


if __name__ == "__main__":
    main()
