"""The documentation site builds strictly: every page in nav, every link and anchor resolves.

`mkdocs build --strict` runs on a copy of the site's sources in a temp dir (the checkout is
left as it is), once as they are and once with a broken link, a broken anchor and a page
left out of nav, each of which must be named and fail the build.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = ["mkdocs.yml", "mkdocs_hooks.py", "README.md", "docs"]


def site_sources(into: Path) -> Path:
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, into / name)
        else:
            shutil.copy2(source, into / name)
    return into


def build(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(root / "site")],
                          cwd=root, capture_output=True, text=True, env=env, timeout=300)


def test_site_builds_strictly_with_the_readme_as_home(tmp_path):
    root = site_sources(tmp_path)
    result = build(root)
    assert result.returncode == 0, result.stderr
    home = (root / "site" / "index.html").read_text()
    assert "Your first hour" in home and 'href="search-spaces/"' in home  # docs/ links made relative
    pages = {p.stem for p in (REPO / "docs").glob("*.md")}
    assert pages and all((root / "site" / page / "index.html").is_file() for page in pages)


def test_broken_link_broken_anchor_and_page_missing_from_nav_fail(tmp_path):
    root = site_sources(tmp_path)
    with open(root / "README.md", "a") as readme:
        readme.write("\nSee [gone](docs/no-such-page.md) and [there](docs/statistics.md#no-such-section).\n")
    (root / "docs" / "orphan.md").write_text("# Left out of nav\n")
    result = build(root)
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr
    assert "no-such-section" in result.stderr
    assert "orphan.md" in result.stderr


def test_docs_pages_named_in_code_exist():
    """A docstring or comment that sends the reader to docs/PAGE.md names a page that exists."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    named = {(source, page) for source in tracked if source not in {"tests/test_docs_site.py", "mkdocs_hooks.py"}
             for page in re.findall(r"docs/[\w.-]+\.md", (REPO / source).read_text(encoding="utf-8"))}
    assert named
    assert [f"{source}: {page}" for source, page in sorted(named) if not (REPO / page).is_file()] == []


def test_the_guide_is_under_3000_lines():
    """docs/ is how to use the tool and why it works as it does, under 3,000 lines (issue 56);
    the study includes are generated reports and do not count."""
    from shapesweep.results.study_docs import INCLUDE

    lines = sum(INCLUDE.sub("", page.read_text(encoding="utf-8")).count("\n")
                for page in sorted((REPO / "docs").glob("*.md")))
    assert lines < 3000, f"docs/*.md hold {lines} lines besides their study includes"
