# One command sets up a fresh machine and runs the demo; another runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch goes in first, so nothing later pulls a multi-GB CUDA build.
# On a GPU machine: make setup TORCH='torch --index-url https://download.pytorch.org/whl/cu124'
TORCH ?= torch==2.13.0

.PHONY: setup demo test lint browser bench
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# Headless Chromium for the dashboard's browser tests (Debian packages; needs root or sudo).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -q && apt-get install -y -q chromium chromium-driver; }

demo: setup
	$(VENV)/bin/shapesweep demo

test: setup browser
	$(PY) -m pytest -q -ra

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) -m benchmarks.run_all
