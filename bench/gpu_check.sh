#!/usr/bin/env bash
# The GPU check as one prepared run on a GPU machine without internet, from the repository
# root (depnmt need not be installed there):
#
#   bash bench/gpu_check.sh [OUT_DIR] [gpu_check.py options...]
#
# Writes OUT_DIR/gpu-check.md, gpu-check.md.json and gpu-check.log (OUT_DIR: $OUT, else
# build/gpu-check), and on a GPU OUT_DIR/profile.md (bench/profile_train.py: abs and
# abs+dep+rel). The pure-Python wheels the check needs beyond torch, click, rich, sacrebleu and
# numpy, made where pip works, into wheels/ (git-ignored), for the GPU machine's Python:
#
#   python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       -d wheels subword-nmt==0.3.8 tqdm 'rich-click>=1.9'
#
# are installed from there into a folder of their own first (nothing else is touched). The
# label-bins attention kernel's rows need Triton, which a CUDA build of torch brings, and the C
# compiler and Python headers with which Triton builds its launcher at the first use (as
# torch.compile does); where they are missing its rows fail and say why.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-build/gpu-check}}
[ $# -gt 0 ] && shift
mkdir -p "$out"
if compgen -G "wheels/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/gpu-check-site wheels/*.whl || exit 1
  export PYTHONPATH=/tmp/gpu-check-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
  > "$out/gpu.csv" 2>&1
python3 bench/gpu_check.py --out "$out/gpu-check.md" "$@" 2>&1 | tee "$out/gpu-check.log"
status=${PIPESTATUS[0]}
# on a GPU, then: where a training step of abs and of abs+dep+rel goes (phases, kernel time by
# kind, the longest kernels; Transformer-base, bf16, the speed section's batches), about a
# minute; its failure is reported and leaves the check's exit status as it is
if python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
then
  timeout 300 python3 bench/profile_train.py --device cuda --schemes abs,dep+rel --steps 10 \
    --top 12 > "$out/profile.md" 2>&1 || echo "profile failed: see $out/profile.md"
fi
exit "$status"
