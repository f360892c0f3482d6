#!/usr/bin/env bash
# WMT En→De (and De→En) as the GPS paper (seed 002, §4.1) ran it, on GPUs: training data
# downloaded from its public homes, newstest sets through sacrebleu, Moses tokenization, joint
# BPE (32k merges), source trees from the source language's parser, Transformer-base, 8,000 warm-up steps, label smoothing
# 0.1, beam 4 with α = 0.6, sacreBLEU.
#
#   bash recipes/wmt-en-de/run.sh                          # SETTING=wmt16, every system
#   SETTING=wmt17 bash recipes/wmt-en-de/run.sh
#   SETTING=nc11 bash recipes/wmt-en-de/run.sh             # News Commentary v11 only
#   SYSTEMS="abs abs+gps" bash recipes/wmt-en-de/run.sh --until bpe
#   SRC=de TGT=en SETTING=nc11 bash recipes/wmt-en-de/run.sh   # the paper's NC11 De→En
#
# Settings (the paper's Table 1):
#   wmt16  Europarl v7 + Common Crawl + News Commentary v11; dev newstest2015, test newstest2016;
#          100k updates, dropout 0.1
#   wmt17  Europarl v7 + Common Crawl + News Commentary v12 + Rapid 2016; dev newstest2016,
#          test newstest2017; 100k updates, dropout 0.1
#   nc11   News Commentary v11; dev newstest2015, test newstest2016; 20k updates, dropout 0.3
# Direction: SRC=en TGT=de (default) or SRC=de TGT=en, the direction of the paper's NC11 rows of
# Table 2 and of its layer study (Table 3: SYSTEMS="abs+gps-layer1 abs+gps-layer2 … abs+gps-layer6
# abs+gps-all", the syntax term in encoder layer 1…6 — the paper's 0…5 — or all); the source
# trees are then German (stanza's German models). DOWNLOAD=DIR shares one download folder between the two directions. WMT16: the paper drops the pairs whose source is not in the source language (after
# Bugliarello & Okazaki 2020); so does `prepare --langid-filter src` here (py3langid, offline;
# LANGID_FILTER=none to keep them, =both to check the target too; every other setting: none).
# On clean text it only drops short lines it misidentifies (README, "prepare"). Parser: PARSE
# (default "--backend stanza", as close to the paper's Stanford CoreNLP as is installable; the
# parse stage first fetches stanza's models for the source language with `depnmt models download
# LANG`, into $STANZA_RESOURCES_DIR or stanza's default folder, or the PARSE flags'
# --stanza-dir). SHARDS=N parses in N parallel shards;
# on a cluster run each `depnmt parse --shard i/N` on its own node, then `--merge`.
# DATA_JOBS=N: prepare, parse and bpe (counting, applying) in N worker processes (their
# --jobs; default auto, one per core; each parse process loads its own parser model); the data
# is the same for any N.
# Batches: MAX_TOKENS per process (default 4096) × UPDATE_FREQ (default 2); with torchrun set
# TRAIN_LAUNCH="torchrun --nproc_per_node 4 -m depnmt.cli" (see the README) and UPDATE_FREQ=1.
# ARCH overrides the model size, VALID_EVERY the validation interval (2000). A download folder
# that holds train/dev/test.{en,de} and a `done` file is used as it is.
# Every stage is skipped when done; trainings resume.
set -euo pipefail
. "$(dirname "$0")/../lib/compare.sh"
usage="usage: bash recipes/wmt-en-de/run.sh [--until download|prepare|parse|bpe|train]"
read_until "$usage" "$@"
SETTING=${SETTING:-wmt16}
SRC_LANG=${SRC:-en} TGT_LANG=${TGT:-de}
case $SRC_LANG-$TGT_LANG in
  en-de|de-en) ;;
  *) echo "error: SRC/TGT must be en/de or de/en, not '$SRC_LANG/$TGT_LANG'" >&2; exit 2 ;;
esac
WORK=${DEPNMT_WORK:-work/wmt-$SRC_LANG-$TGT_LANG-$SETTING}
DATA_JOBS=${DATA_JOBS:-auto}
LANGID_FILTER=${LANGID_FILTER:-$([ "$SETTING" = wmt16 ] && echo src || echo none)}
SYSTEMS=${SYSTEMS:-abs abs+pascal abs+structural abs+gps abs+dep+rel}
DBSA_LAYER=${DBSA_LAYER:-4}
BEAM=${BEAM:-4}
STATMT=http://www.statmt.org DATA_STATMT=http://data.statmt.org
EUROPARL=$STATMT/europarl/v7/de-en.tgz
COMMONCRAWL=$STATMT/wmt13/training-parallel-commoncrawl.tgz
NC11=$DATA_STATMT/wmt16/translation-task/training-parallel-nc-v11.tgz
NC12=$DATA_STATMT/wmt17/translation-task/training-parallel-nc-v12.tgz
RAPID=$DATA_STATMT/wmt17/translation-task/rapid2016.tgz
case $SETTING in
  wmt16) URLS="$EUROPARL $COMMONCRAWL $NC11"; DEV=wmt15; TEST=wmt16; STEPS=${STEPS:-100000}; DROPOUT=0.1 ;;
  wmt17) URLS="$EUROPARL $COMMONCRAWL $NC12 $RAPID"; DEV=wmt16; TEST=wmt17; STEPS=${STEPS:-100000}; DROPOUT=0.1 ;;
  nc11)  URLS="$NC11"; DEV=wmt15; TEST=wmt16; STEPS=${STEPS:-20000}; DROPOUT=0.3 ;;
  *) echo "error: SETTING must be wmt16, wmt17 or nc11, not '$SETTING'" >&2; exit 2 ;;
esac
for s in $SYSTEMS; do system_flags "$s"; done          # unknown names fail before any work
read -r -a parse_flags <<< "${PARSE:---backend stanza}"
read -r -a arch <<< "${ARCH:---layers 6 --d-model 512 --heads 8 --d-ff 2048}"
COMMON=("${arch[@]}" --dropout "$DROPOUT" --label-smoothing 0.1
        --share-all-embeddings --lr 7e-4 --warmup "${WARMUP:-8000}" --max-tokens "${MAX_TOKENS:-4096}"
        --update-freq "${UPDATE_FREQ:-2}" --max-steps "$STEPS" --valid-every "${VALID_EVERY:-2000}"
        --valid-max-sentences 500 --beam "$BEAM" --alpha 0.6)

# download: the parallel corpora (cached in $WORK/download) and the newstest sets (sacrebleu)
D=${DOWNLOAD:-$WORK/download}
mkdir -p "$D"
if [ ! -f "$D/done" ]; then
  for url in $URLS; do
    archive=$D/$(basename "$url")
    if [ ! -f "$archive" ]; then
      curl -fL --retry 3 -o "$archive.part" "$url"
      mv "$archive.part" "$archive"
    fi
    tar -xzf "$archive" -C "$D"
  done
  # every de-en pair of files in the archives (Europarl, Common Crawl, News Commentary, Rapid)
  : > "$D/train.en.part"; : > "$D/train.de.part"
  while read -r en; do
    de=${en%.en}.de
    [ -f "$de" ] || continue
    [ "$(wc -l < "$en")" = "$(wc -l < "$de")" ] || { echo "error: $en and $de differ in lines" >&2; exit 2; }
    cat "$en" >> "$D/train.en.part"; cat "$de" >> "$D/train.de.part"
    echo "   $(wc -l < "$en") pairs from $en"
  done < <(find "$D" -type f -name '*.de-en.en' | sort)
  mv "$D/train.en.part" "$D/train.en"; mv "$D/train.de.part" "$D/train.de"
  for split in dev test; do
    set_name=$DEV; [ $split = test ] && set_name=$TEST
    sacrebleu -t "$set_name" -l "$SRC_LANG-$TGT_LANG" --echo src > "$D/$split.$SRC_LANG"
    sacrebleu -t "$set_name" -l "$SRC_LANG-$TGT_LANG" --echo ref > "$D/$split.$TGT_LANG"
  done
  touch "$D/done"
fi
stop_after download

S=$SRC_LANG T=$TGT_LANG
done_stage "$WORK/prepare" || depnmt prepare --src-lang "$S" --tgt-lang "$T" \
  --train-src "$D/train.$S" --train-tgt "$D/train.$T" --dev-src "$D/dev.$S" --dev-tgt "$D/dev.$T" \
  --test-src "$D/test.$S" --test-tgt "$D/test.$T" --max-len 250 --langid-filter "$LANGID_FILTER" \
  --jobs "$DATA_JOBS" -o "$WORK/prepare"
stop_after prepare

sides=$(tree_sides $SYSTEMS)
TREES=${sides:+$WORK/parse}
[ -z "$sides" ] || parse_trees "$WORK/prepare" "$TREES" "$sides" "${parse_flags[@]}"
stop_after parse

DATA=$WORK/bpe
done_stage "$DATA" || depnmt bpe -i "$WORK/prepare" -o "$DATA" --joint --merges 32000 --jobs "$DATA_JOBS"
stop_after bpe

run_campaign "$WORK/runs" $SYSTEMS
stop_after train
report_systems "$WORK/runs" $SYSTEMS
