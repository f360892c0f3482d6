#!/usr/bin/env bash
# WAT'18 ASPEC-JE Ja→En, the seeds' main setting, on one GPU (the CPU works but takes weeks).
#
#   bash recipes/aspec-ja-en/run.sh /data/ASPEC                 # every stage, every system
#   SETTING=dbsa bash recipes/aspec-ja-en/run.sh /data/ASPEC    # Deguchi et al. 2019's setting
#   bash recipes/aspec-ja-en/run.sh /data/ASPEC --until bpe     # stop after a stage
#   SYSTEMS="abs dep" bash recipes/aspec-ja-en/run.sh /data/ASPEC
#
# ASPEC is licensed: obtain it from its distributor and give the folder holding ASPEC-JE/
# (train/train-{1,2}.txt, dev/dev.txt, test/test.txt); without it the recipe names the missing
# files and exits with status 2. Stages, each skipped when its manifest.json exists (so
# re-running resumes, trainings included):
#   extract  the first 1.5M pairs of train-1 + train-2 (FIRST), dev.txt (1,790), test.txt (1,812)
#   prepare  Sudachi (mode C, as GiNZA) for Japanese, Moses for English; SETTING=omote keeps
#            training pairs of ≤ 50 words per side (Omote et al. 2019 §5.1)
#   parse    GiNZA for Japanese (and spaCy en_core_web_sm for English when a system needs
#            target trees); PARSE="--backend stanza" for stanza (its models are fetched
#            first with `depnmt models download`). SHARDS=N parses in N parallel
#            shards and merges them — on a cluster, run each `depnmt parse --shard i/N` on its
#            own node, then `depnmt parse --merge`
#   bpe      omote: words, vocabularies of words seen ≥ 7 (ja) / ≥ 10 (en) times;
#            dbsa: joint BPE with a 100k vocabulary (Deguchi et al. §4.1)
#   train    every system of SYSTEMS with the papers' hyper-parameters: 6+6 layers, 8 heads,
#            d_model 512, d_ff 2048, Adam (0.9, 0.98, 1e-9), 4,000 warm-up steps, k = l = 2,
#            label smoothing 0.1, dropout 0.1; omote: 30 epochs, batches of ~256 sentences,
#            greedy decoding (as Omote reports); dbsa: 20 epochs, ~224 sentences, ≤ 250 subwords,
#            beam 4 with α = 0.6; best dev BLEU checkpoint
#   report   the results table: results.{md,json,png} in $WORK/runs
set -euo pipefail
. "$(dirname "$0")/../lib/compare.sh"
usage="usage: bash recipes/aspec-ja-en/run.sh ASPEC_DIR [--until extract|prepare|parse|bpe|train]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
ASPEC=$1; shift
read_until "$usage" "$@"
SETTING=${SETTING:-omote}
WORK=${DEPNMT_WORK:-work/aspec-ja-en-$SETTING}
FIRST=${FIRST:-1500000}
SRC_LANG=ja TGT_LANG=en
DBSA_LAYER=${DBSA_LAYER:-4}
read -r -a parse_flags <<< "${PARSE:---backend spacy}"
case $SETTING in
  omote) SYSTEMS=${SYSTEMS:-abs rel dep dep+rel deplabel deplabel+rel}
         BEAM=${BEAM:-1}; EPOCHS=${EPOCHS:-30}; MAX_TOKENS=${MAX_TOKENS:-8192}
         PREPARE_FILTER=(--max-len 50) ;;
  dbsa)  SYSTEMS=${SYSTEMS:-abs dbsa-enc dbsa-dec dbsa-enc+dec}
         BEAM=${BEAM:-4}; EPOCHS=${EPOCHS:-20}; MAX_TOKENS=${MAX_TOKENS:-8192}
         PREPARE_FILTER=() ;;
  *) echo "error: SETTING must be omote or dbsa, not '$SETTING'" >&2; exit 2 ;;
esac
for s in $SYSTEMS; do system_flags "$s"; done          # unknown names fail before any work
COMMON=(--layers 6 --d-model 512 --heads 8 --d-ff 2048 --dropout 0.1 --label-smoothing 0.1
        --lr 7e-4 --warmup 4000 --max-tokens "$MAX_TOKENS" --max-epochs "$EPOCHS" --max-len 250
        --rel-k 2 --dep-l 2 --deplabel-k 2 --beam "$BEAM" --alpha 0.6)

# extract: checks the ASPEC folder first (a clear error naming the missing files)
done_stage "$WORK/extract" || python -m depnmt.aspec "$ASPEC" "$WORK/extract" --first "$FIRST"
stop_after extract

E=$WORK/extract
done_stage "$WORK/prepare" || depnmt prepare --src-lang ja --tgt-lang en \
  --train-src "$E/train.ja" --train-tgt "$E/train.en" --dev-src "$E/dev.ja" --dev-tgt "$E/dev.en" \
  --test-src "$E/test.ja" --test-tgt "$E/test.en" "${PREPARE_FILTER[@]}" -o "$WORK/prepare"
stop_after prepare

sides=$(tree_sides $SYSTEMS)
TREES=${sides:+$WORK/parse}
[ -z "$sides" ] || parse_trees "$WORK/prepare" "$TREES" "$sides" "${parse_flags[@]}"
stop_after parse

case $SETTING in
  omote) DATA=$WORK/words
         done_stage "$DATA" || depnmt bpe -i "$WORK/prepare" -o "$DATA" --mode word \
           --src-min-freq 7 --tgt-min-freq 10 ;;
  dbsa)  DATA=$WORK/bpe
         done_stage "$DATA" || depnmt bpe -i "$WORK/prepare" -o "$DATA" --joint --merges 100000 ;;
esac
stop_after bpe

run_campaign "$WORK/runs" $SYSTEMS
stop_after train
report_systems "$WORK/runs" $SYSTEMS
