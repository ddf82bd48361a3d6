#!/usr/bin/env bash
# The GPU checks and benchmarks in one prepared run (issue #9 item 5), for a machine with CUDA:
#   bash bench/gpu.sh [results folder]        (default bench/results; the device tool: $OUT)
#
# Runs the CUDA-only tests (marker `gpu`), then the recognizer benchmarks on CUDA in float16 with
# larger batches; results are written beside the CPU ones as <name>-cuda.{json,md,png} and
# `python -m bench.run --readme` places them after their CPU counterparts.
#
# Needs the project's Python dependencies and the tiny.en weights importable there. On the
# lent H200 (Python 3.12, torch preinstalled, nothing fetchable) the weights (75 MB) exceed one
# call's 64 MiB transfer: bench/gpu_carry.sh prepares the wheels and the weights in two parts
# and gives the two device calls that carry them and run this script. Not yet run on a GPU: no
# session so far got a machine (one task was lent one, but new loans were paused that day).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/results}"
python="${PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python=python3
export PYTHONUNBUFFERED=1

"$python" - <<'PY'
import torch
assert torch.cuda.is_available(), "bench/gpu.sh needs a CUDA device"
print("cuda:", torch.cuda.get_device_name(0), "torch", torch.__version__)
PY

status=0
# The files that hold the CUDA tests (collecting all of tests/ would need Kafka's, faust's and
# the dev tools' packages there too).
"$python" -m pytest -m gpu -p no:cacheprovider -q \
    tests/integration/test_whisper_parity.py tests/integration/test_vad_real.py \
    tests/integration/test_health_probes.py || status=1
"$python" -m bench.engine_rtf --device cuda --batch-sizes 1 4 16 64 --out "$out" || status=1
"$python" -m bench.engine_concurrency --device cuda --max-batch 64 --channels 16 32 64 128 \
    --out "$out" || status=1
exit "$status"
