# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Both create .venv (Python >= 3.12; pyenv/uv honour .python-version) and install refindex into it.

PYTHON ?= $(shell command -v python3.12 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: demo test install bench charts docs fuzz clean

# uv resolves and installs the ~170 packages in seconds where pip takes two minutes (most of a fresh
# `make test` went to pip); uv comes from PyPI into the venv itself. Where it cannot be had, pip does it.
# uv does not compile bytecode at install (pip does); the suite writes it as it imports (see test).
# Its argument is the editable requirement; $(call) splits arguments at commas, hence $(comma).
comma := ,
define venv_install
$(PY) -m pip install --quiet uv && $(VENV)/bin/uv pip install --quiet --python $(PY) -e "$(1)" \
	|| $(PY) -m pip install --quiet -e "$(1)"
endef

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "refindex needs Python >= 3.12 (found " + sys.version.split()[0] + "); set PYTHON=/path/to/python3.12")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(call venv_install,.[test$(comma)nwb$(comma)dask])
	touch $(STAMP)

# benchmark-only tools (remfile for P4), on top of the project's own install
$(BENCH_STAMP): $(STAMP)
	$(call venv_install,.[bench])
	touch $(BENCH_STAMP)

install: $(STAMP)

# the example files stay in demo/ (README's quick starts run there); the demo ends saying how to run refindex
demo: $(STAMP)
	$(VENV)/bin/refindex demo --dir demo

# two workers; a test file stays on one worker (its module fixtures and tallies), except the corpus
# modules tests/conftest.py spreads test by test (SPREAD_MODULES), which fill the end of the run
TEST_WORKERS ?= 2

# The suite starts many processes (CLI, workers, the docs' pages, the stock reader): each would compile
# every module it imports again where PYTHONDONTWRITEBYTECODE is set (as on our machines; importing
# zarr, h5py, pynwb and xarray took 5.8 s instead of 2.4 s), so the suite writes bytecode into .venv
# and __pycache__ as it goes (test_docs and test_cli: 107 s -> 52 s).
test: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadgroup

# (bytecode written as for the suite: refindex's lazy imports count in P4's opens, and an installed
# refindex has its bytecode; compiling its modules in every fresh process added ~0.15 s to each open)
bench: $(BENCH_STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(PY) benchmarks/run_all.py

# the charts of benchmarks/RESULTS.md again, without running the benchmarks
charts: $(BENCH_STAMP)
	$(PY) benchmarks/charts.py

# the documentation site (docs/ -> site/), strict: a broken link or a missing page fails
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

fuzz: $(STAMP)
	$(PY) benchmarks/fuzz_long.py

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache
