# The two commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export TF_CPP_MIN_LOG_LEVEL ?= 3

.PHONY: demo test install install-dev bench

$(VENV)/.installed: requirements.txt pyproject.toml setup.py data/tokenization/_fast_wordpiece.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# End to end on the embedded default (demo/): see README.
demo: $(VENV)/.installed
	$(PY) -m demo.run_demo --output_dir demo_output

# Two pytest workers (pytest-xdist): CI's 2 cores; much of a test is Python (tracing, process
# start-up) that one core runs while the other computes. `TEST_WORKERS=0 make test` runs serially.
# tests/suite.py runs the suite, then the numeric golden tests again with oneDNN and XLA capped
# at AVX2 (docs/testing.md); the 25 slowest tests are listed (the whole must stay under 10
# minutes in CI).
export TEST_WORKERS ?= 2
test: $(VENV)/.installed-dev
	$(PY) -m tests.suite

# Cloud TPU VM: tensorflow-tpu 2.20.0 instead of requirements.txt's tensorflow (see
# requirements-tpu.txt for why tensorflow-text and the package go in with --no-deps). Marks the
# venv installed, so `make test` / `make demo` then use it as it is.
.PHONY: install-tpu
install-tpu: requirements-tpu.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	-$(PY) -m pip uninstall -q -y tensorflow
	$(PY) -m pip install -q -r requirements-tpu.txt
	$(PY) -m pip install -q --no-deps tensorflow-text==2.20.1
	$(PY) -m pip install -q --no-deps -e .
	touch $(VENV)/.installed
