#!/usr/bin/env bash
# A lent GPU session as one command: the data carried in, the device checked, the campaign's next units trained to a
# deadline (untimed stages only: a stage whose epoch times the book shows trains on one quiet machine), the runs
# exported as a bundle to bring back.
#
#   here, once:          bash scripts/gpu-session.sh pack             (MNIST into gpu/, a git-ignored folder)
#   on the GPU machine:  bash scripts/gpu-session.sh run SECONDS      (carry gpu/; the bundle lands in $OUT)
#   here, after:         python -m vitbn_nb runs import BUNDLE && python -m vitbn_nb campaign commit, then commit
#                        figures/records/
#
# On the GPU machine the image's python3 holds torch and the book's other training dependencies; the package runs
# from the working tree (PYTHONPATH), nothing is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:-}
case "$action" in
pack)
    python=${PYTHON:-.venv/bin/python}
    "$python" -m vitbn_nb data >/dev/null
    mkdir -p gpu
    tar -czf gpu/mnist.tar.gz -C data MNIST
    echo "gpu/mnist.tar.gz ($(du -h gpu/mnist.tar.gz | cut -f1)): carry the folder gpu/ to the GPU machine"
    ;;
run)
    seconds=${2:?give the seconds the session may train, e.g. 420}
    out=${OUT:?set OUT to the folder the bundle is written to}
    [ -f gpu/mnist.tar.gz ] || { echo "gpu/mnist.tar.gz is missing: run 'bash scripts/gpu-session.sh pack' here and carry gpu/" >&2; exit 2; }
    mkdir -p data && tar -xzf gpu/mnist.tar.gz -C data
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" VITBN_RUNS_DIR="$PWD/gpu/runs" VITBN_PROGRESS=0
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
