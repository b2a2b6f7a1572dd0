# One command sets up a fresh machine and runs the demo; another runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch goes in first, from PyTorch's CPU index, so nothing later pulls a
# multi-GB CUDA build; where that index is unreachable, the registry's torch is used instead.
# On a GPU machine: make setup TORCH_INDEX=https://download.pytorch.org/whl/cu124
TORCH ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: setup demo test test-fast lint docs browser postgres shells bench
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --timeout 20 --retries 1 --index-url $(TORCH_INDEX) '$(TORCH)' || \
	  { echo "$(TORCH_INDEX) unreachable: installing $(TORCH) from the default index"; \
	    $(PY) -m pip install -q '$(TORCH)'; }
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps 'litgpt>=0.5,<0.6'  # see pyproject's litgpt extra
	touch $@

# Headless Chromium for the dashboard's browser tests (Debian packages; needs root or sudo).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -q && apt-get install -y -q chromium chromium-driver; }

# PostgreSQL server binaries for the loopback storage test (Debian packages; needs root or sudo).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; }

# zsh, for the shell-completion test (bash is there already; Debian package, root or sudo).
shells:
	@command -v zsh >/dev/null || { apt-get update -q && apt-get install -y -q zsh; }

demo: setup
	$(VENV)/bin/shapesweep demo $(DEMO_ARGS)

test: setup browser postgres shells
	$(PY) -m pytest -q -ra

# The inner loop: everything but the Ray end-to-end tests (marked slow), in a few minutes.
test-fast: setup browser shells
	$(PY) -m pytest -q -ra -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .

# The documentation site (mkdocs.yml) into site/: strict, so a broken link or anchor, or a page
# missing from nav, fails the build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Each prints its figures as ratios taken side by side in one run (docs/benchmarks.md).
bench: setup
	$(PY) benchmarks/bench_solver.py
	$(PY) benchmarks/bench_train_step.py --quick
	$(PY) -m benchmarks.bench_sweep_overhead
	$(PY) -m benchmarks.bench_asha_efficiency
	$(PY) benchmarks/bench_analysis.py
	$(PY) benchmarks/bench_report.py --trials 2000
