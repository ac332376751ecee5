# The two commands of the book: `make book` and `make test` (see README.md).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PROFILE ?= auto
# torch as it lies on the build machines' disk for x86_64; elsewhere whatever pip picks.
TORCH := $(if $(filter x86_64,$(shell uname -m)),torch==2.14.1 torchvision==0.29.1,torch torchvision)
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get
PIP_QUIET := 2>&1 | { grep -v "^WARNING: Location" || true; }

.PHONY: book test data bench lab app clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH) $(PIP_QUIET)
	$(PY) -m pip install -q -e ".[book,tracking,test]" $(PIP_QUIET)
	touch $@

data: $(VENV)/.installed
	$(PY) -m vitbn_nb data

book: data
	$(PY) -m vitbn_nb book --profile $(PROFILE) $(if $(CHAPTERS),--chapters $(CHAPTERS))

test: $(VENV)/.installed
	@# the browser tests drive Debian's Chromium; where it cannot be installed they are skipped
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null \
		|| $(APT_GET) install -y -q chromium chromium-driver >/dev/null 2>&1 \
		|| { $(APT_GET) update -q >/dev/null 2>&1 && $(APT_GET) install -y -q chromium chromium-driver >/dev/null 2>&1; } \
		|| echo "Chromium could not be installed (apt-get needs root); the browser tests will be skipped."
	$(PY) -m pytest

bench: $(VENV)/.installed
	$(PY) -m vitbn_nb bench

lab: $(VENV)/.installed
	$(VENV)/bin/jupyter lab notebooks/

app: $(VENV)/.installed
	$(PY) -m vitbn_nb.app $(if $(PORT),--port $(PORT))

clean:
	rm -rf build runs
