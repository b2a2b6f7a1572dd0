"""The one YAML reader for every file shapesweep reads (spaces, candidates, a sweep's space.yaml).

`yaml.safe_load` never runs code, but it still lets a small file cost a lot: aliases
expand (a 641-byte "billion laughs" takes seconds and gigabytes), a duplicate key
silently overrides the first, and non-UTF-8 bytes or a NUL end in a traceback. Here the
file is capped in size, decoded strictly, searched for characters YAML forbids, composed
into a node tree with aliases refused (so nothing expands), checked for duplicate keys
(naming their dotted key), and only then constructed by PyYAML's safe constructor.
Every problem is one `UserError`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from shapesweep.common import UserError

MAX_BYTES = 1 << 20  # 1 MiB: the largest built-in space is a few KiB


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses aliases while composing, before anything is expanded."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise _Refused(f"YAML aliases (*name) are not supported (line {mark.line + 1})")
        return super().compose_node(parent, index)


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
    loader = _Loader(data)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_keys(node, "")
        return loader.construct_document(node)
    except _Refused as error:
        raise UserError(error.problem, file=file, key=error.key) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise UserError(f"malformed YAML{where}: {problem} (not valid YAML or JSON)",
                        file=file) from None
    except (RecursionError, MemoryError):
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
