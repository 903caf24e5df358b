#!/usr/bin/env bash
# One prepared check for a lent NVIDIA GPU machine (written for an H200), run from the repo root:
#
#   OUT=/some/dir bash benchmarks/gpu_check.sh
#
# 0. which python has torch, timm, lightning, einops, pytest (carried wheels in .whl/ are installed
#    to /tmp/site if something is missing);
# 1. the CUDA tests (named *cuda*, in files that mention cuda; they skip without a GPU)       -> $OUT/cuda_tests.txt
# 2. bf16 training-step throughput, ViT-S/16 at 224, 256, 512 px (14x14, 16x16 and 32x32 grids)
#    against timm, MFU against the H200's dense bf16 datasheet peak of 989 TFLOP/s and against a
#    bf16 matmul measured in the same run                                     -> $OUT/performance.json (.md)
# 3. torch.compile speed-up for rope2d and relbias at 224 px, eval at 224 and 320 px    -> $OUT/performance_compile.json (.md)
#
# Each part has its own timeout; the whole script stays under ~6 minutes. Logs: $OUT/*.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vitpos_gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0

# -- 0. environment ------------------------------------------------------------------------------
PY=python3
[ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null && PY=.venv/bin/python
missing=$($PY - <<'EOF'
import importlib.util
print(" ".join(m for m in ("torch", "timm", "lightning", "einops", "pytest", "yaml") if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$missing" ]; then
  echo "missing in $PY: $missing"
  if compgen -G ".whl/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH="/tmp/site:$PYTHONPATH"
  fi
fi
{
  echo "python: $($PY -c 'import sys; print(sys.version.split()[0], sys.executable)')"
  $PY -c "import torch, timm; print('torch', torch.__version__, 'timm', timm.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name())"
  $PY -c "import lightning; print('lightning', lightning.__version__)" 2>&1 | tail -1
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader 2>&1
} | tee "$OUT/env.txt"
if ! $PY -c "import torch, timm, einops; assert torch.cuda.is_available()"; then
  echo "no usable torch+timm+CUDA: stopping" | tee -a "$OUT/env.txt"
  exit 1
fi

# -- 1. CUDA tests -------------------------------------------------------------------------------
echo "== CUDA tests"
timeout 75 $PY -m pytest -q -rs -p no:cacheprovider -k cuda $(grep -l cuda tests/test_*.py) 2>&1 | tee "$OUT/cuda_tests.txt" | tail -15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# -- 2. throughput against timm, bf16 ------------------------------------------------------------
echo "== throughput (bf16, ViT-S/16)"
timeout 150 $PY benchmarks/throughput.py --device cuda --dtype bf16 --model small --patch-size 16 \
  --img-sizes 224 256 512 --batch-size 256 256 128 --repeats 5 --steps 5 --warmup 3 --data-images 64 \
  --out "$OUT/performance.json" >/dev/null 2> "$OUT/throughput.log"
rc=$?
tail -40 "$OUT/throughput.log"
[ $rc -eq 0 ] || { echo "throughput exited $rc (124 = timeout)"; status=1; }

# -- 3. torch.compile, two schemes ---------------------------------------------------------------
echo "== torch.compile (bf16, ViT-S/16, 224 px; eval 224 and 320 px)"
timeout 150 $PY benchmarks/throughput.py --device cuda --dtype bf16 --model small --patch-size 16 \
  --img-sizes 224 --eval-img-sizes 224 320 --batch-size 256 --schemes rope2d relbias \
  --repeats 3 --steps 5 --warmup 2 --compile --out "$OUT/performance_compile.json" >/dev/null 2> "$OUT/compile.log"
rc=$?
grep -E "compile|Error|error" "$OUT/compile.log" | tail -20
[ $rc -eq 0 ] || { echo "compile part exited $rc (124 = timeout)"; status=1; }

$PY benchmarks/render.py "$OUT"  # the pages, from the JSON written there
echo "== done, status $status; files in $OUT:"
ls -la "$OUT"
exit $status
