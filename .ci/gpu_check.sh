#!/usr/bin/env bash
# The prepared check for a CUDA machine, run from the repo root (about 6 minutes; its figures are not in docs/):
#
#   OUT=/some/dir bash .ci/gpu_check.sh
#
# the CUDA tests; bf16 training throughput of ViT-S/16 at 224, 256 and 512 px against timm, with MFU against the
# datasheet and a matmul measured in the same run; torch.compile for rope2d and relbias (train at 224 px, eval at 224
# and 320 px). JSON, pages and logs land in $OUT. It runs on the python of .venv/ when that has torch, else python3;
# that python needs vitpos's dependencies and the dev extra (pip install -e ".[dev]").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vitpos_gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=python3
[ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null && PY=.venv/bin/python
$PY -c "import torch, timm, lightning, einops, pytest, yaml" 2>/dev/null \
  || { echo "$PY lacks vitpos's dependencies: pip install -e \".[dev]\" first; stopping"; exit 1; }
$PY -c "import torch, timm; print('torch', torch.__version__, 'timm', timm.__version__, torch.cuda.get_device_name())" \
  | tee "$OUT/env.txt" || { echo "no usable torch + timm + CUDA: stopping"; exit 1; }

status=0
step() {  # step NAME SECONDS COMMAND...: the command under a time limit, its output in $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  echo "== $name"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1 || { echo "$name exited $? (124: timed out)"; status=1; }
  tail -20 "$OUT/$name.log"
}
step cuda_tests 75 $PY -m pytest -q -rs -p no:cacheprovider -k cuda $(grep -l cuda tests/test_*.py)
bench="$PY benchmarks/throughput.py --device cuda --dtype bf16 --model small --patch-size 16"
step throughput 150 $bench --img-sizes 224 256 512 --batch-size 256 256 128 --repeats 5 --steps 5 --warmup 3 \
  --data-images 64 --out "$OUT/performance.json"
step compile 150 $bench --compile --img-sizes 224 --eval-img-sizes 224 320 --batch-size 256 --schemes rope2d relbias \
  --repeats 3 --steps 5 --warmup 2 --out "$OUT/performance_compile.json"
$PY -m benchmarks.pages "$OUT"  # the pages, from the JSON written there
exit $status
