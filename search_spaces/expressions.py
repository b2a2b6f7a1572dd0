"""Constraint expressions: a small arithmetic language over the solver's numpy columns.

A space's `constraints:` are user text, so they are never `eval`ed. `compile_expression`
parses one with `ast` and accepts only column names, numbers, arithmetic, comparisons,
and/or/not, a few named functions, and text only compared with a column (a categorical
one: `task == 'denoise'`); `Expression.evaluate` then walks that tree with numpy. Every
number is float64 (a constant beyond it is refused), so a power of columns overflows to
`inf` instead of hanging in Python's unbounded ints, and a constant exponent above
MAX_EXPONENT (`9**9**9`) is refused outright.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_LENGTH = 1000  # characters of one expression
MAX_NODES = 200  # syntax-tree nodes of one expression
MAX_EXPONENT = 64  # a constant exponent beyond this is a mistake (or a `9**9**9` hang)
# name -> (numpy function, number of arguments)
SAFE_FUNCTIONS: dict[str, tuple[Callable[..., Any], int]] = {"abs": (np.abs, 1), "min": (np.minimum, 2), "max": (np.maximum, 2),
                  "log": (np.log, 1), "log2": (np.log2, 1), "sqrt": (np.sqrt, 1),
                  "round": (np.round, 1), "floor": (np.floor, 1), "ceil": (np.ceil, 1)}
BINARY: dict[type[ast.operator], Callable[..., Any]] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
          ast.Pow: operator.pow}
UNARY: dict[type[ast.unaryop], Callable[..., Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Not: np.logical_not}
COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
           ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
BOOLEAN = {ast.And: np.logical_and, ast.Or: np.logical_or}
STRUCTURE = (ast.Expression, ast.Load, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp,
             *BINARY, *UNARY, *COMPARE, *BOOLEAN)


class ExpressionError(ValueError):
    """An expression outside the language (the message says what and where)."""


@dataclass(frozen=True)
class Expression:
    text: str
    tree: ast.Expression

    def evaluate(self, columns: Mapping[str, object], n: int) -> np.ndarray:
        """A bool mask of the n rows where the expression holds."""
        with np.errstate(all="ignore"):
            value = _eval(self.tree.body, columns)
        return np.broadcast_to(np.asarray(value, dtype=bool), (n,))


def compile_expression(text: str, names: set[str] | frozenset[str]) -> Expression:
    """Parse `text` and check that it uses only the language and the given column names."""
    if not isinstance(text, str):
        raise ExpressionError(f"expected an expression as text, got {text!r}")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        raise ExpressionError(f"not an expression: {error.msg}") from None
    except ValueError as error:  # e.g. a null byte
        raise ExpressionError(f"not an expression: {error}") from None
    except (RecursionError, MemoryError):
        raise ExpressionError("not an expression: nested too deeply") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ExpressionError(f"more than {MAX_NODES} terms")
    called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
    compared = {id(operand) for node in nodes if isinstance(node, ast.Compare)
                for operand in (node.left, *node.comparators)}
    for node in nodes:
        if id(node) not in called:
            _check(node, names, id(node) in compared)
    for node in nodes:
        if isinstance(node, ast.Compare):
            _check_text_operands([node.left, *node.comparators])
    for node in nodes:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            _check_exponent(node.right)
    return Expression(text, tree)


def _check_text_operands(operands: list[ast.AST]) -> None:
    """Text is compared with a column (`task == 'denoise'`), never with a number or a sum."""
    for i, operand in enumerate(operands):
        if isinstance(operand, ast.Constant) and isinstance(operand.value, str):
            neighbours = operands[max(i - 1, 0):i] + operands[i + 1:i + 2]
            if not all(isinstance(n, ast.Name) for n in neighbours):
                raise ExpressionError(f"the text {operand.value!r} can only be compared with a "
                                      "column (as in task == 'denoise')")


def _check_exponent(node: ast.AST) -> None:
    """Refuse a constant exponent above MAX_EXPONENT (evaluated in float64, so it is quick)."""
    if any(isinstance(n, ast.Name) for n in ast.walk(node)):
        return  # a column's exponent: float64 overflows to inf, it cannot hang
    try:
        with np.errstate(all="ignore"):
            value = float(_eval(node, {}))
    except (TypeError, ValueError, ArithmeticError) as error:
        raise ExpressionError(f"cannot evaluate the exponent: {error}") from None
    if not abs(value) <= MAX_EXPONENT:
        raise ExpressionError(f"exponent {value:g} is too large (limit {MAX_EXPONENT})")


def _check(node: ast.AST, names, compared: bool) -> None:
    if isinstance(node, STRUCTURE):
        return
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        try:
            float(node.value)  # type: ignore[arg-type]  # int, float or bool (checked above)
        except OverflowError:
            raise ExpressionError(f"the number {str(node.value)[:12]}... ({len(str(node.value))} "
                                  "digits) is beyond float64, which every column is") from None
        return
    if isinstance(node, ast.Constant) and type(node.value) is str and compared:
        return
    if isinstance(node, ast.Name):
        if node.id in names:
            return
        raise ExpressionError(f"unknown name {node.id!r} (available: {', '.join(sorted(names))}; "
                              f"functions: {', '.join(SAFE_FUNCTIONS)})")
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in SAFE_FUNCTIONS:
            raise ExpressionError(f"only these functions may be called: {', '.join(SAFE_FUNCTIONS)}")
        arity = SAFE_FUNCTIONS[name][1]
        if node.keywords or len(node.args) != arity or any(isinstance(a, ast.Starred) for a in node.args):
            raise ExpressionError(f"{name}() takes {arity} positional argument(s)")
        return
    what = type(node).__name__
    if isinstance(node, ast.Constant):
        what = f"the constant {node.value!r} here"
    raise ExpressionError(f"{what} is not allowed (only column names, numbers, arithmetic, "
                          "comparisons, and/or/not, the functions "
                          f"{', '.join(SAFE_FUNCTIONS)}, and text compared with a column)")


def _eval(node: ast.AST, columns: Mapping[str, object]) -> Any:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return np.str_(node.value)
        return np.bool_(node.value) if isinstance(node.value, bool) else np.float64(node.value)  # type: ignore[arg-type]
    if isinstance(node, ast.Name):
        return _column(node.id, columns)
    if isinstance(node, ast.BinOp):
        return BINARY[type(node.op)](_eval(node.left, columns), _eval(node.right, columns))
    if isinstance(node, ast.UnaryOp):
        return UNARY[type(node.op)](_eval(node.operand, columns))
    if isinstance(node, ast.BoolOp):
        return functools.reduce(BOOLEAN[type(node.op)], (_eval(v, columns) for v in node.values))
    if isinstance(node, ast.Compare):
        left, result = _eval(node.left, columns), np.bool_(True)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, columns)
            result = np.logical_and(result, COMPARE[type(op)](left, right))
            left = right
        return result
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):  # compile_expression: only names
        function = SAFE_FUNCTIONS[node.func.id][0]
        return function(*(_eval(a, columns) for a in node.args))
    raise ExpressionError(f"{type(node).__name__} is not allowed")  # compile_expression refused it


def _column(name: str, columns: Mapping[str, object]) -> np.ndarray:
    """A column as float64 (text stays text): numpy never builds Python's unbounded ints."""
    if name not in columns:
        raise ExpressionError(f"unknown name {name!r}")
    value = np.asarray(columns[name])
    if value.dtype.kind in "US":
        return value
    try:
        return value.astype(np.float64)
    except (TypeError, ValueError):
        return value.astype(str)
