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

.PHONY: book book-settings test test-fast lint data bench check-device lab app clean clean-runs readme lock campaign
# Extra arguments for lab, app and book: make app ARGS="--port 8000", make lab ARGS="--no-browser"
ARGS ?=
# Jupyter refuses to run as root unless told; containers often run as root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

# The lock (Linux x86_64, one file per Python) pins every package with its hashes; `make lock` remakes it.
PYVER := $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")' 2>/dev/null)
LOCK := requirements/lock-py$(PYVER).txt
USE_LOCK := $(and $(filter x86_64,$(shell uname -m)),$(wildcard $(LOCK)))
EXTRAS := book,tracking,test

$(VENV)/.installed: pyproject.toml $(wildcard requirements/lock-py*.txt)
	@echo "installing the book's pinned environment into $(VENV) (torch, Jupyter and the rest: several GiB, some minutes; once; pip names each package as it goes) ..."
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	date +%s > $(VENV)/.install-start
ifneq ($(USE_LOCK),)
	$(PY) -m pip install --require-hashes -r $(LOCK) $(PIP_QUIET)
	$(PY) -m pip install -q --no-deps -e . $(PIP_QUIET)
else
	@echo "No lock for this machine ($(shell uname -m), Python $(PYVER)): installing unpinned (torch as on x86_64)."
	$(PY) -m pip install $(TORCH) $(PIP_QUIET)
	$(PY) -m pip install -e ".[$(EXTRAS)]" $(PIP_QUIET)
endif
	echo $$(( $$(date +%s) - $$(cat $(VENV)/.install-start) )) > $(VENV)/.install-seconds
	touch $@

# Remake the locks from pyproject.toml and requirements/pins.in (needs the package registry).
lock: $(VENV)/.installed
	$(PY) -m pip install -q uv $(PIP_QUIET)
	for version in 3.11 3.12; do \
		$(PY) -m uv pip compile pyproject.toml requirements/pins.in --extra book --extra tracking --extra test \
			--python-version $$version --python-platform x86_64-manylinux_2_28 --generate-hashes \
			--custom-compile-command "make lock" -o requirements/lock-py$${version/./}.txt; \
	done

data: $(VENV)/.installed
	$(PY) -m vitbn_nb data

# By default a run is read from the run store, else from the records committed in figures/records/, and only a
# run neither holds is trained. FROM=scratch leaves the committed records out (a reproduction: trains every run the
# store lacks); TRAIN=never trains nothing and names a missing run.
TRAIN ?=
FROM ?=
# The settings of `make book`, refused at once (before the install and the data), each by name.
book-settings:
	@case "$(PROFILE)" in smoke|cpu|paper|auto) ;; *) echo "make book: PROFILE=$(PROFILE) is not allowed; use smoke, cpu, paper or auto" >&2; exit 2;; esac
	@case "$(TRAIN)" in ""|never) ;; *) echo "make book: TRAIN=$(TRAIN) is not allowed; use TRAIN=never (render only) or leave it unset" >&2; exit 2;; esac
	@case "$(FROM)" in ""|scratch) ;; *) echo "make book: FROM=$(FROM) is not allowed; use FROM=scratch (a reproduction) or leave it unset" >&2; exit 2;; esac
	@for c in $(CHAPTERS); do c=$${c%.ipynb}; ls notebooks/*.ipynb | grep -Eq "/(0?$${c}_[^/]*|$${c})\.ipynb$$" || { echo "make book: CHAPTERS: no chapter '$$c' in notebooks/; give numbers (03) or names (03_fixed_lr)" >&2; exit 2; }; done

book: book-settings data
	$(PY) -m vitbn_nb book --profile $(PROFILE) $(if $(CHAPTERS),--chapters $(CHAPTERS)) $(if $(filter never,$(TRAIN)),--no-train) $(if $(filter scratch,$(FROM)),--from-scratch) $(ARGS)

# A pytest-xdist worker per core, each test module on one worker (its module-scoped fixtures built once).
PARALLEL := -n auto --dist loadscope
test: $(VENV)/.installed
	@# the browser tests drive Debian's Chromium; where it cannot be installed they are skipped
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null \
		|| $(APT_GET) install -y -q chromium chromium-driver >/dev/null 2>&1 \
		|| { $(APT_GET) update -q >/dev/null 2>&1 && $(APT_GET) install -y -q chromium chromium-driver >/dev/null 2>&1; } \
		|| echo "Chromium could not be installed (apt-get needs root); the browser tests will be skipped."
	@# the slowest tests are named at the end, so that a CI log shows where its minutes went
	$(PY) -m pytest $(PARALLEL) --durations=20

# The unit tests only (no chapter executed, no browser, no training beyond a few steps): a couple of minutes.
test-fast: $(VENV)/.installed
	$(PY) -m pytest $(PARALLEL) -m "not slow and not book and not browser"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check vitbn_nb tests
	$(VENV)/bin/ruff format --check vitbn_nb tests

bench: $(VENV)/.installed
	$(PY) -m vitbn_nb bench

# The paper profile trained over sessions (README, "The articles' own protocols"): DEADLINE=SECONDS stops in time.
DEADLINE ?=
campaign: data
	$(PY) -m vitbn_nb campaign $(if $(DEADLINE),--deadline $(DEADLINE)) $(ARGS)

# Does this device train the book's engines right? A few minutes; the verdict is kept in the run store.
check-device: $(VENV)/.installed
	$(PY) -m vitbn_nb check-device $(ARGS)

lab: $(VENV)/.installed
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) --ServerApp.log_level=WARN --LabApp.log_level=WARN notebooks/ $(ARGS)

app: $(VENV)/.installed
	$(PY) -m vitbn_nb.app $(if $(PORT),--port $(PORT)) $(ARGS)

readme: $(VENV)/.installed
	$(PY) -m vitbn_nb readme

# Build outputs only: the run store (hours of training under paper) stays unless asked for.
clean:
	rm -rf build

clean-runs:
	@echo "This deletes every trained run in runs/ (hours of training under the paper profile)."
	@read -r -p "Type 'delete' to go on: " answer && [ "$$answer" = delete ] && rm -rf runs && echo "runs/ deleted"
