"""mkdocs hooks: the README is the site's home page, so the overview has one source.

The README links into docs/ as `docs/PAGE.md` (what works on GitHub); from the site's root
that page is `PAGE.md`. Pages link back to the README as `../README.md`, which the site
serves as `index.md`. Only link targets are rewritten; the text is the README's own.

Every GPU figure a page quotes (`40.2%<!--gpu:mfu_113m_baseline-->`) is filled from the
figures file, `trainers/gpu-figures.json` (`shapesweep.trainers.gpu_figures`), so the site
shows the file's figures whatever a page's text says; tests/test_gpu_figures.py fails where
the text and the file differ.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

from shapesweep.trainers import gpu_figures

README_LINK = re.compile(r"\]\(\.\./README\.md")
DOCS_LINK = re.compile(r"\]\(docs/")


def on_files(files, config):
    readme = Path(config.config_file_path).parent / "README.md"
    home = DOCS_LINK.sub("](", readme.read_text(encoding="utf-8"))
    files.append(File.generated(config, "index.md", content=home))
    return files


def on_page_markdown(markdown, page, config, files):
    return gpu_figures.fill(README_LINK.sub("](index.md", markdown), gpu_figures.load())
