"""No tracked file names a folder of the machine it was written on: commands in the docs and
benchmarks take a placeholder (`--root ROOT`) or a relative path, which works on any machine.

Every absolute path in a tracked text file must start with an allowed top folder, each a
standard place that is the same on every Linux machine, not one machine's own."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# An absolute path: a slash not inside a word, URL, relative path or expression, then a name
# and another slash.
ABSOLUTE = re.compile(r"(?<![\w.:/~$}\-\]>)*%'])/(?P<top>[A-Za-z_][\w.-]*)/")
ALLOWED = {
    "usr": "system programs and libraries (/usr/bin/env, /usr/lib/postgresql, /usr/bin/chromium)",
    "proc": "the kernel's process interface",
    "dev": "device files (/dev/zero, the bad-input tests' non-regular file)",
    "etc": "system configuration (/etc/passwd, a path-traversal target in the tests)",
    "sys": "the kernel's device interface",
    "nfs": "the cluster guide's example of storage every node mounts, not a folder here",
    "api": "the live server's URL routes (/api/...), not files",
}
# (file, top): one path each, named with why it is not a machine's folder.
EXCEPTIONS = {
    ("sweep/driver/ray_compat.py", "tmp"): "Ray's own default session folder under the system temp dir",
    ("dashboards/page.py", "e"): "a JavaScript regular expression literal",
    ("tests/test_serve.py", "s"): "URL paths a test sends to the live server",
    ("tests/test_serve.py", "plotly.min.js"): "URL paths a test sends to the live server",
    ("benchmarks/bench_commits.py", "search_spaces"): "a path joined onto a checkout's root",
}
SKIP = {".gitignore"}  # its patterns are anchored at the repository, not absolute paths


def tracked_text() -> dict[str, str]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    out = {}
    for name in names:
        path = ROOT / name
        if name in SKIP or not path.is_file():
            continue
        try:
            out[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # Parquet, images: no text to name a path in
            continue
    return out


def test_no_tracked_file_names_a_machine_path():
    found = [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {text[m.start():m.end() + 20]!r}"
             for name, text in tracked_text().items() for m in ABSOLUTE.finditer(text)
             if m["top"] not in ALLOWED and (name, m["top"]) not in EXCEPTIONS]
    assert not found, "machine paths in tracked files:\n" + "\n".join(found)


def test_the_check_finds_a_machine_path():
    """The pattern catches the paths it exists for, and passes URLs and relative paths."""
    s = "/"  # joined here, so this file names no such path itself
    caught = [m["top"] for m in ABSOLUTE.finditer(
        f"shapesweep run S --root {s}work/sweeps40; cd {s}tmp/fresh; `{s}home/me/x`; ({s}root/a/b)")]
    assert caught == ["work", "tmp", "home", "root"]
    assert not list(ABSOLUTE.finditer(
        "https://download.pytorch.org/whl/cu128 docs/gpu.md ./a/b ../old d_model/L tokens/s/GPU"))


def test_every_path_above_a_page_is_in_the_checkout():
    """A page's `../PATH` (a link back to the README, say) names a file of the checkout, never
    a folder beside it that only one machine's workspace has."""
    found = []
    for name, text in tracked_text().items():
        if not name.endswith(".md"):
            continue
        for m in re.finditer(r"\.\./[\w./-]*[\w/]", text):
            target = (ROOT / name).parent / m[0]
            if not target.resolve().is_relative_to(ROOT) or not target.exists():
                found.append(f"{name}: {m[0]}")
    assert not found, "paths outside the checkout:\n" + "\n".join(found)
