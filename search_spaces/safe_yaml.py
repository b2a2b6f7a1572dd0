"""The one YAML reader for every file shapesweep reads (spaces, candidates, a sweep's space.yaml).

`yaml.safe_load` never runs code, but it still lets a small file cost a lot: aliases
expand (a 641-byte "billion laughs" takes seconds and gigabytes), a duplicate key
silently overrides the first, and non-UTF-8 bytes or a NUL end in a traceback. Here the
file is capped in size, decoded strictly, searched for characters YAML forbids, composed
into a node tree with aliases refused (so nothing expands), checked for duplicate keys
(naming their dotted key), and only then constructed by PyYAML's safe constructor.
Every problem is one `UserError`.

The tree is composed by libyaml where PyYAML has it (`CSafeLoader`: a 900 KB search list
loads about 5x faster, docs/limits.md) and checked as it is walked: an alias is a node met
twice. A document that fails there is read again by the pure-Python loader, whose messages
(the line of an alias, of a scanner error) are the ones users see either way.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from shapesweep.common import UserError, printable

MAX_BYTES = 1 << 20  # 1 MiB: the largest built-in space is a few KiB


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses aliases while composing, before anything is expanded."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise _Refused(f"YAML aliases (*name) are not supported (line {mark.line + 1})")
        return super().compose_node(parent, index)


_FastLoader = getattr(yaml, "CSafeLoader", None)  # None where PyYAML was built without libyaml


class _Aliased(Exception):
    """The fast loader met a node twice: an alias, refused with the slow loader's words."""


class _Refused(Exception):
    """A document this reader will not construct (the message says why)."""

    def __init__(self, problem: str, key: str | None = None):
        super().__init__(problem)
        self.problem, self.key = problem, key


def read_yaml(path: str | Path) -> Any:
    """The document in a local YAML (or JSON) file; `UserError` naming the file otherwise."""
    return parse_yaml(read_bytes(path), str(path))


def read_bytes(path: str | Path) -> bytes:
    """A local file's bytes, refused above MAX_BYTES before it is read."""
    file = str(path)
    try:
        size = os.stat(path).st_size
        if size > MAX_BYTES:
            raise UserError(f"file is {size:,} bytes; the limit is {MAX_BYTES:,}", file=file)
        with open(path, "rb") as handle:
            return handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise UserError(f"cannot read: {error.strerror or error}", file=file) from None


def parse_yaml(data: bytes | str, file: str) -> Any:
    """The document in YAML text (bytes must be UTF-8); see the module docstring."""
    if len(data) > MAX_BYTES:
        raise UserError(f"more than {MAX_BYTES:,} bytes of YAML", file=file)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise UserError(f"not UTF-8 text (byte {error.start}: {data[error.start]:#04x})",
                            file=file) from None
    _check_printable(data, file)
    if _FastLoader is not None:
        try:
            return _load(_FastLoader, data, file)
        except (_Aliased, yaml.YAMLError, RecursionError):
            pass  # the slow loader says where and what, as it always has
    return _load(_Loader, data, file)


def _load(loader_class: type, data: str, file: str) -> Any:
    """Compose, check and construct `data` with `loader_class`; `UserError` on a refusal."""
    loader = loader_class(data)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if loader_class is _FastLoader:
            _check_no_alias(node)  # the slow loader refuses an alias as it composes
        _check_keys(node, "")
        document = loader.construct_document(node)
        _check_encodable(document)
        return document
    except _Refused as error:
        raise UserError(error.problem, file=file, key=error.key) from None
    except yaml.YAMLError as error:
        if loader_class is _FastLoader:
            raise
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise UserError(f"malformed YAML{where}: {problem} (not valid YAML or JSON)",
                        file=file) from None
    except RecursionError:
        if loader_class is _FastLoader:
            raise
        raise UserError("YAML nested too deeply", file=file) from None
    except MemoryError:
        raise UserError("YAML nested too deeply", file=file) from None
    except ValueError as error:  # e.g. an integer with more digits than Python will convert
        raise UserError(f"malformed YAML: {error}", file=file) from None
    finally:
        loader.dispose()


def _check_printable(text: str, file: str) -> None:
    """Refuse a character YAML does not allow anywhere (a NUL or another control byte),
    naming where it is: PyYAML's reader raises it before parsing starts."""
    found = yaml.reader.Reader.NON_PRINTABLE.search(text)
    if found:
        line = text.count("\n", 0, found.start()) + 1
        column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
        raise UserError(f"character U+{ord(found.group()):04X} at line {line}, column {column} "
                        "is not allowed in YAML (a control character: is this a binary file?)",
                        file=file)


def _check_no_alias(root: yaml.Node) -> None:
    """Raise `_Aliased` if the fast loader's tree holds a node twice (where an alias points),
    walking each node once: nothing is expanded."""
    seen, todo = set(), [root]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            raise _Aliased
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            todo.extend(part for pair in node.value for part in pair)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_encodable(document: object) -> None:
    """Refuse text no UTF-8 file, table or terminal can hold: a lone surrogate, which a quoted
    YAML string may spell (`"demo\\ud800"`)."""
    todo: list[tuple[object, str]] = [(document, "")]
    while todo:
        value, where = todo.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                path = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise _Refused("a key holds a lone surrogate (an unpaired \\uD800-\\uDFFF "
                                   "escape), which no UTF-8 text can hold", key=printable(path))
                todo.append((item, path))
        elif isinstance(value, list):
            todo.extend((item, f"{where}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, str) and _SURROGATE.search(value):
            raise _Refused("the text holds a lone surrogate (an unpaired \\uD800-\\uDFFF "
                           "escape), which no UTF-8 text can hold", key=where)


def _check_keys(node: yaml.Node, where: str) -> None:
    """Refuse a key given twice in one mapping (PyYAML keeps the last one silently)."""
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_keys(item, f"{where}[{i}]")
    elif isinstance(node, yaml.MappingNode):
        seen = set()
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else repr(key.value)
            path = f"{where}.{name}" if where else name
            if key.tag == "tag:yaml.org,2002:merge":
                raise _Refused("YAML merge keys (<<) are not supported", key=path)
            if name in seen:
                raise _Refused(f"duplicate key (line {key.start_mark.line + 1}); give it once",
                               key=path)
            seen.add(name)
            _check_keys(value, path)
