#!/usr/bin/env bash
# Is it faster to run two trainings with one thread each than one with two threads? The
# comparison recipes' JOBS=N (recipes/lib/compare.sh) rests on this measurement.
#
#   bash bench/jobs.sh BPE_DIR OUT_DIR [ROUNDS] [STEPS]
#
# A = one training with 2 threads alone; B = two 1-thread trainings at once; interleaved
# A B A B ... (ROUNDS, default 2), STEPS updates each (default 140; logged in windows of up to
# 20 updates, at least 7 windows) of the Multi30k comparison's
# model (3+3 layers, d_model 192, 2,048-token batches). Reports the median target tokens/s of
# each (first and last log record dropped), B's summed over its two trainings, the ratio B/A,
# the load average before each and the CPU flags. Pause other work on the machine first.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,12p "$0" >&2; exit 2; }
bpe=$1 out=$2 rounds=${3:-2} steps=${4:-140}
log_every=$(( steps / 7 > 1 ? (steps / 7 < 20 ? steps / 7 : 20) : 1 ))   # >= 7 windows, <= 20 updates
mkdir -p "$out"
train() {   # train OUT THREADS
  OMP_NUM_THREADS=$2 DEPNMT_NO_PROGRESS=1 depnmt train -i "$bpe" -o "$1" --layers 3 \
    --d-model 192 --heads 4 --d-ff 768 --share-all-embeddings --lr 1e-3 --max-tokens 2048 \
    --warmup 400 --max-steps "$steps" --valid-every 0 --log-every "$log_every" --seed 7 \
    > "$1.log" 2>&1
}
echo "CPU flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "cores: $(nproc)"
for ((r = 1; r <= rounds; r++)); do
  rm -rf "$out/r$r-"*
  echo "round $r: A, load $(cut -d' ' -f1 /proc/loadavg)"
  train "$out/r$r-a" 2
  echo "round $r: B, load $(cut -d' ' -f1 /proc/loadavg)"
  train "$out/r$r-b1" 1 & train "$out/r$r-b2" 1 & wait
done
python - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def tps(d):
    rows = [json.loads(line) for line in open(f"{out}/{d}/metrics.jsonl")]
    return statistics.median([r["tgt_tokens_per_s"] for r in rows if r["event"] == "train"][1:-1])
for r in range(1, rounds + 1):
    a, b = tps(f"r{r}-a"), tps(f"r{r}-b1") + tps(f"r{r}-b2")
    print(f"round {r}: A (1 x 2 threads) {a:.0f} tgt tok/s, B (2 x 1 thread) {b:.0f} summed, "
          f"B/A {b / a:.2f}")
PY
