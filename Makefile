# One command sets up a fresh machine and runs the demo; another runs the tests.
VENV ?= .venv
# Python writes each module's bytecode (.pyc) the first time it imports it, so every later
# process (each trial's, each of Ray's) reads torch's and Ray's modules rather than compiling
# their sources again: half the CPU a process spends starting. Some images set
# PYTHONDONTWRITEBYTECODE, and uv installs no bytecode; make's recipes run without it
# (docs/development.md, "Bytecode").
unexport PYTHONDONTWRITEBYTECODE
PY := $(VENV)/bin/python
# The CPU build of torch goes in first, from PyTorch's CPU index, so nothing later pulls a
# multi-GB CUDA build; where that index is unreachable, the default index's torch is used
# instead (and named). On a GPU machine:
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cu128   (docs/gpu.md)
# The venv remembers what it was given ($(VENV)/.torch): a later `make` keeps it, and a
# different TORCH or TORCH_INDEX, or a torch build replaced by hand, reinstalls torch.
# A CUDA index that leaves a CPU build installed fails setup in one line.
TORCH_STAMP := $(VENV)/.torch
TORCH ?= $(or $(shell sed -n 1p $(TORCH_STAMP) 2>/dev/null),torch==2.13.0)
TORCH_INDEX ?= $(or $(shell sed -n 2p $(TORCH_STAMP) 2>/dev/null),https://download.pytorch.org/whl/cpu)
TORCH := $(TORCH)
TORCH_INDEX := $(TORCH_INDEX)
# The torch build the venv holds, from its metadata (no import: this runs on every `make`).
TORCH_BUILD = $(PY) -c "import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null || echo none
# uv (a PyPI package) installs in seconds what pip takes minutes for: the uv on PATH, else the
# one pip puts in the venv; where neither is there, or uv fails, pip does the work.
UV = $(or $(shell command -v uv 2>/dev/null),$(wildcard $(VENV)/bin/uv))
INSTALL = $(if $(UV),$(UV) pip install --python $(PY),$(PY) -m pip install) -q
PIP := $(PY) -m pip install -q
# installed without its dependencies: see pyproject's litgpt extra
LITGPT := litgpt>=0.5,<0.6
# uv reads no pip configuration: where pip's find-links name local wheels ($PIP_FIND_LINKS), the
# fallback torch comes from them through uv (3 s here, against pip's 22 s), else from pip.
TORCH_FROM_LINKS = $(if $(and $(UV),$(PIP_FIND_LINKS)),$(INSTALL) $(foreach l,$(PIP_FIND_LINKS),--find-links '$(l)') '$(TORCH)' ||)
# An unreachable torch index costs 20 s, not minutes of retries.
QUICK = $(if $(UV),UV_HTTP_TIMEOUT=20 UV_HTTP_RETRIES=1 $(INSTALL),$(INSTALL) --timeout 20 --retries 1)

.PHONY: setup demo test test-fast lint docs browser postgres shells slurm bench FORCE
setup: $(VENV)/.installed

$(PY):
	python3 -m venv $(VENV)
	@command -v uv >/dev/null || $(PIP) uv || echo "setup: uv not installable: pip installs instead"

# What torch the venv should hold: rewritten only when TORCH, TORCH_INDEX or the installed
# build changes, so that only then is torch reinstalled.
$(TORCH_STAMP).want: FORCE | $(PY)
	@{ echo '$(TORCH)'; echo '$(TORCH_INDEX)'; $(TORCH_BUILD); } > $@.new
	@cmp -s $@.new $@ && rm $@.new || mv $@.new $@

# Says which torch got installed from where; fails (one line, exit 1) on a CPU build from a
# CUDA index. Arguments: the index, the requirement, where it came from.
define TORCH_REPORT
import re, sys, torch
index, wanted, source = sys.argv[1:]
cuda = torch.version.cuda
print(f"setup: torch {torch.__version__} ({'CUDA ' + cuda if cuda else 'CPU'} build) from {source}")
if re.search(r"/cu[0-9]+", index) and not cuda:
    sys.exit(f"setup: {index} is a CUDA index, but torch {torch.__version__} is a CPU build: "
             f"that index was unreachable or has no {wanted} for this Python")
endef
export TORCH_REPORT

# A venv set up before it recorded its torch (no stamp) keeps the torch it holds, unless
# TORCH or TORCH_INDEX is given: it is recorded as if installed from the defaults.
$(TORCH_STAMP): $(TORCH_STAMP).want
	@if cmp -s $< $@; then touch -r $@ $<; exit 0; fi; \
	if [ ! -e $@ ] && [ -e $(VENV)/.installed ] && [ "$$(sed -n 3p $<)" != none ] && \
	   [ '$(origin TORCH)$(origin TORCH_INDEX)' = filefile ]; then \
	  echo "setup: keeping torch $$(sed -n 3p $<), which this venv held before it recorded its index"; \
	  cp $< $@ && touch -r $(VENV)/.installed $@; exit 0; fi; \
	$(if $(UV),$(UV) pip uninstall -q --python $(PY),$(PY) -m pip uninstall -q -y) torch 2>/dev/null; \
	$(QUICK) --index-url $(TORCH_INDEX) '$(TORCH)' && from='$(TORCH_INDEX)' || \
	  { echo "setup: $(TORCH_INDEX) unreachable or without $(TORCH): installing it from the default index"; \
	    { $(TORCH_FROM_LINKS) $(PIP) '$(TORCH)'; } && from='the default index'; } && \
	  $(PY) -W ignore -c "$$TORCH_REPORT" '$(TORCH_INDEX)' '$(TORCH)' "$$from" && \
	{ echo '$(TORCH)'; echo '$(TORCH_INDEX)'; $(TORCH_BUILD); } > $< && cp $< $@  # what it holds now

$(VENV)/.installed: pyproject.toml $(TORCH_STAMP)
	$(INSTALL) -e '.[dev]' $(if $(UV),|| { echo "setup: uv failed: pip installs instead"; $(PIP) -e '.[dev]'; })
	$(INSTALL) --no-deps '$(LITGPT)' $(if $(UV),|| $(PIP) --no-deps '$(LITGPT)')
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

# SLURM (slurmctld, slurmd, sbatch) and munge for the local-cluster test of the batch script
# (Debian packages; needs root or sudo).
slurm:
	@command -v sbatch >/dev/null && command -v slurmctld >/dev/null && command -v slurmd >/dev/null && \
	  command -v munged >/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge; }

demo: setup
	$(VENV)/bin/shapesweep demo $(DEMO_ARGS)

# Two pytest-xdist workers, a test module each at a time (its shared Ray stays in one
# process): the suite mostly waits on process starts, so two run in about two thirds of the
# time of one (docs/development.md). The modules go out in collection order, the longest
# first (tests/conftest.py's LONG_FIRST), so the two finish together. TEST_WORKERS=0 runs it
# in this one process.
TEST_WORKERS ?= 2
PYTEST = $(PY) -m pytest -q -ra $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# The whole suite, what CI runs (.ci/run): with the system packages its tests need, and the
# type checker (tests/test_types.py: mypy reports no error in the package).
test: setup browser postgres shells slurm
	$(PYTEST)

# The inner loop, under 5 minutes on 2 cores: all but the Ray end-to-end tests and the few
# other long ones (marked slow: the whole-package mypy run, cold; a benchmark's torch.compile
# processes; a MoE's 150 real steps, the sequential design's FWER simulations, a kill loop's
# second layout; real-process runs of 5-13 s: a server's port and builder,
# a killed export or writer, a silent database's deadline and signals, train's thread default)
# and the tests of a system package (marked system: Chromium, zsh), so it installs nothing
# outside the venv (`make lint` runs mypy).
test-fast: setup
	$(PYTEST) -m "not slow and not system"

# ruff, and mypy over the package (pyproject's [tool.mypy]; no module is exempt).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy -p shapesweep

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
