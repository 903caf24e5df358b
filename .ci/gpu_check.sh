#!/usr/bin/env bash
# The prepared check for a CUDA machine, run from the repo root; its record and page land in $OUT:
#
#   OUT=/some/dir [DEADLINE=570] [FMNIST_DIR=...] bash .ci/gpu_check.sh
#
# Parts, in this order, each under its own time limit and all within DEADLINE seconds (a part that would start with
# less than a minute left is skipped; what a part finished is written as it goes):
#   1. cuda_tests: every CUDA-only test (bf16-mixed training of every scheme, SDPA kernel choice, flex against dense,
#      fp32 rotations under autocast, DDP evaluation counts on one device);
#   2. throughput: ViT-S/16 bf16 training at 224, 384 and 512 px for learned, rope2d, relbias, rope2d-mixed and
#      lookhere against timm, eager; then compiled at 224 px (compiled_more: 384 and 512 px, if time is left);
#   3. attention: dense-bias SDPA against FlexAttention for relbias, cpb, alibi2d and lookhere, 224-512 px;
#   4. fashion_mnist: rope2d, sincos2d, learned and relbias trained at once with configs/fashion_mnist_gpu.yaml for
#      FMNIST_EPOCHS epochs (default 8), each swept over 28-112 px on validation with every transfer method.
#      FMNIST_DIR holds the idx files (default /usr/share/datasets/fashion-mnist); without them the part is skipped.
# Then `python -m benchmarks.pages $OUT` renders $OUT/gpu.md from the JSON there (gpu*.json); docs/gpu.md
# is that page, with its JSON beside it. It runs on the python of .venv/ when that has torch, else python3; that python
# needs vitpos's dependencies and the dev extra (pip install -e ".[dev]").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vitpos_gpu_check}
DEADLINE=${DEADLINE:-570}
FMNIST_DIR=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
FMNIST_EPOCHS=${FMNIST_EPOCHS:-8}
START=$SECONDS
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=python3
[ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null && PY=.venv/bin/python
missing=$($PY -c "
import importlib.util as u
need = ('torch', 'timm', 'lightning', 'einops', 'torchmetrics', 'pytest', 'xdist', 'yaml', 'torchdata')
print(' '.join(n for n in need if u.find_spec(n) is None))" 2>/dev/null) \
  || { echo "gpu_check: $PY does not run; stopping" >&2; exit 1; }
[ -z "$missing" ] || { echo "gpu_check: $PY lacks $missing: pip install -e \".[dev]\" first; stopping" >&2; exit 1; }
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null \
  || { echo "gpu_check: no CUDA device here (torch.cuda.is_available() is False); stopping" >&2; exit 1; }
$PY -m benchmarks.gpu start "$OUT" --command "bash .ci/gpu_check.sh" >/dev/null || exit 1

status=0
step() {  # step NAME SECONDS COMMAND...: the command under its limit (cut to the time left), its log in $OUT/NAME.log
  local name=$1 limit=$2 left t0 rc junit=()
  shift 2
  left=$((DEADLINE - (SECONDS - START) - 20))  # 20 s kept for the pages
  if [ "$left" -lt 60 ]; then echo "== $name: skipped, ${left} s left"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (at most $limit s)"
  t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || { echo "$name exited $rc (124: ran out of time)"; status=1; }
  [ -f "$OUT/$name.xml" ] && junit=(--junit "$OUT/$name.xml")
  $PY -m benchmarks.gpu part "$OUT" "$name" --rc "$rc" --seconds $((SECONDS - t0)) --limit "$limit" "${junit[@]}" \
    >/dev/null
  tail -5 "$OUT/$name.log"
}

# 1. CUDA tests
step cuda_tests 100 $PY -m pytest -q -rs -p no:cacheprovider -k cuda --junitxml "$OUT/cuda_tests.xml" \
  $(grep -l cuda tests/test_*.py)
# 2. training throughput against timm: eager at every size, then compiled at 224 px first
bench="$PY -m benchmarks.throughput --device cuda --dtype bf16 --model small --patch-size 16 \
  --schemes learned rope2d relbias rope2d-mixed lookhere --steps 5 --warmup 3 --data-images 64"
step throughput 130 $bench --img-sizes 224 384 512 --batch-size 256 128 64 --repeats 5 \
  --out "$OUT/gpu_performance.json"
step compiled 170 $bench --compiled --img-sizes 224 --batch-size 256 --repeats 3 --out "$OUT/gpu_performance_compiled.json"
# 3. attention with a position bias: SDPA against FlexAttention, forward and backward
step attention 110 $PY -m benchmarks.attention --img-sizes 224 384 512 --batch-size 128 64 32 --repeats 5 \
  --out "$OUT/gpu_attention.json"
# 4. resolution transfer beyond 1.5x on Fashion-MNIST
fmnist() {  # the four runs at once (one process each; a small model leaves the GPU room), then each one's sweep
  local pos
  for pos in rope2d sincos2d learned relbias; do
    { $PY train.py --config configs/fashion_mnist_gpu.yaml --pos "$pos" --data-dir "$FMNIST_DIR" \
        --epochs "$FMNIST_EPOCHS" --warmup-epochs 1 --num-workers 3 --out "$OUT/fashion_mnist/$pos" \
      && $PY -m vitpos.evaluate --ckpt "$OUT/fashion_mnist/$pos/checkpoints/last.ckpt" --resolutions 28 56 84 112 \
        --accelerator gpu --num-workers 3 --out "$OUT/fashion_mnist/$pos/sweep"; } >"$OUT/fashion_mnist_$pos.log" 2>&1 &
  done
  local rc=0 job
  for job in $(jobs -p); do wait "$job" || rc=1; done
  return $rc
}
if [ -f "$FMNIST_DIR/train-images-idx3-ubyte.gz" ] || [ -f "$FMNIST_DIR/train-images-idx3-ubyte" ]; then
  export -f fmnist
  export PY OUT FMNIST_DIR FMNIST_EPOCHS
  step fashion_mnist 150 bash -c fmnist
  $PY -m benchmarks.gpu fashion-mnist "$OUT" "$OUT"/fashion_mnist/{rope2d,sincos2d,learned,relbias} >/dev/null
else
  echo "== fashion_mnist: skipped, no Fashion-MNIST files in $FMNIST_DIR"
fi
step compiled_more 170 $bench --compiled --img-sizes 384 512 --batch-size 128 64 --repeats 3 \
  --out "$OUT/gpu_performance_compiled_more.json"
$PY -m benchmarks.pages "$OUT" >/dev/null && echo "wrote $OUT/gpu.md"
exit $status
