#!/usr/bin/env bash
# A lent GPU session as one command: the data carried in, the device checked, the campaign's next units trained to a
# deadline (untimed stages only: a stage whose epoch times the book shows trains on one quiet machine), the runs
# exported as a bundle to bring back.
#
#   here, once:          bash scripts/gpu-session.sh pack             (MNIST and wheels into gpu/, git-ignored)
#   on the GPU machine:  bash scripts/gpu-session.sh run SECONDS      (carry gpu/; the bundle lands in $OUT)
#   here, after:         python -m vitbn_nb runs import BUNDLE && python -m vitbn_nb campaign commit, then commit
#                        figures/records/
#
# On the GPU machine the image's python3 holds torch and most of the book's training dependencies; the package runs
# from the working tree (PYTHONPATH). What the image may lack and cannot fetch (it reaches no network): the run
# store's record checks (jsonschema and the packages it needs), packed here as wheels at the lock's versions, one
# compiled wheel per CPython the project supports, and installed there into gpu/site only when python3 lacks them.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:-}
RECORD_CHECKS="jsonschema jsonschema-specifications referencing rpds-py"  # attrs and typing-extensions come with torch
case "$action" in
pack)
    python=${PYTHON:-.venv/bin/python}
    "$python" -m vitbn_nb data >/dev/null
    mkdir -p gpu
    tar -czf gpu/mnist.tar.gz -C data MNIST
    wheels=()
    for name in $RECORD_CHECKS; do
        pin=$(grep -m1 -i "^$name==" requirements/lock-py312.txt | cut -d' ' -f1)
        [ -n "$pin" ] || { echo "requirements/lock-py312.txt pins no $name: the wheels cannot be packed" >&2; exit 2; }
        wheels+=("$pin")
    done
    rm -rf gpu/wheels && mkdir -p gpu/wheels
    for version in 3.11 3.12 3.13; do
        "$python" -m pip download --quiet --disable-pip-version-check --only-binary :all: --no-deps \
            --implementation cp --python-version "$version" --platform manylinux_2_17_x86_64 \
            --dest gpu/wheels "${wheels[@]}"
    done
    echo "gpu/ ($(du -sh gpu | cut -f1): MNIST and the wheels of ${wheels[*]}): carry the folder gpu/ to the GPU machine"
    ;;
run)
    seconds=${2:?give the seconds the session may train, e.g. 420}
    out=${OUT:?set OUT to the folder the bundle is written to}
    [ -f gpu/mnist.tar.gz ] || { echo "gpu/mnist.tar.gz is missing: run 'bash scripts/gpu-session.sh pack' here and carry gpu/" >&2; exit 2; }
    mkdir -p data && tar -xzf gpu/mnist.tar.gz -C data
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" VITBN_RUNS_DIR="$PWD/gpu/runs" TQDM_DISABLE=1
    if ! python3 -c "import jsonschema" 2>/dev/null; then
        [ -d gpu/wheels ] || { echo "python3 lacks jsonschema and gpu/wheels is missing: run 'bash scripts/gpu-session.sh pack' here and carry gpu/" >&2; exit 2; }
        # --no-deps: these four alone; attrs and typing-extensions stay the image's own
        python3 -m pip install --quiet --disable-pip-version-check --no-index --no-deps --find-links gpu/wheels \
            --target gpu/site $RECORD_CHECKS
        export PYTHONPATH="$PYTHONPATH:$PWD/gpu/site"
    fi
    start=$(date +%s)
    python3 -m vitbn_nb check-device
    left=$(( seconds - ($(date +%s) - start) - 30 ))  # the export's time kept aside
    python3 -m vitbn_nb campaign train --deadline "$left" || echo "campaign: stopped with runs left (resumable)"
    python3 -m vitbn_nb runs export "$out/gpu-bundle.tar" --weights needed
    ls -l "$out"
    ;;
*)
    echo "usage: bash scripts/gpu-session.sh pack | run SECONDS (with OUT set)" >&2
    exit 2
    ;;
esac
