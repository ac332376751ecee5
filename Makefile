# The two commands of the book: `make book` and `make test` (see README.md).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PROFILE ?= auto
# torch as it lies on the build machines' disk for x86_64; elsewhere whatever pip picks.
TORCH := $(if $(filter x86_64,$(shell uname -m)),torch==2.14.1 torchvision==0.29.1,torch torchvision)
PIP_QUIET := 2>&1 | { grep -v "^WARNING: Location" || true; }

.PHONY: book test data bench lab app clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH) $(PIP_QUIET)
	$(PY) -m pip install -q -e ".[book,tracking,test]" $(PIP_QUIET)
	$(PY) -m ipykernel install --sys-prefix --name vitbn-book --display-name "vitbn-book (.venv)" >/dev/null
	touch $@

data: $(VENV)/.installed
	$(PY) -m vitbn_nb data

book: data
	$(PY) -m vitbn_nb book --profile $(PROFILE)

test: $(VENV)/.installed
	$(PY) -m pytest

lab: $(VENV)/.installed
	$(VENV)/bin/jupyter lab notebooks/

clean:
	rm -rf build runs
