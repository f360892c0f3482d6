#!/usr/bin/env bash
# WMT En→De as the GPS paper (seed 002, §4.1) ran it, on GPUs: training data downloaded from
# its public homes, newstest sets through sacrebleu, Moses tokenization, joint BPE (32k merges),
# source trees from the English parser, Transformer-base, 8,000 warm-up steps, label smoothing
# 0.1, beam 4 with α = 0.6, sacreBLEU.
#
#   bash recipes/wmt-en-de/run.sh                          # SETTING=wmt16, every system
#   SETTING=wmt17 bash recipes/wmt-en-de/run.sh
#   SETTING=nc11 bash recipes/wmt-en-de/run.sh             # News Commentary v11 only
#   SYSTEMS="abs gps" bash recipes/wmt-en-de/run.sh --until bpe
#
# Settings (the paper's Table 1):
#   wmt16  Europarl v7 + Common Crawl + News Commentary v11; dev newstest2015, test newstest2016;
#          100k updates, dropout 0.1
#   wmt17  Europarl v7 + Common Crawl + News Commentary v12 + Rapid 2016; dev newstest2016,
#          test newstest2017; 100k updates, dropout 0.1
#   nc11   News Commentary v11; dev newstest2015, test newstest2016; 20k updates, dropout 0.3
# Not reproduced: the paper also drops WMT16 pairs whose source is not English (a language-ID
# filter following Bugliarello & Okazaki 2020); filter train.en/train.de yourself before
# `prepare` if you need it. Parser: PARSE (default "--backend stanza", as close to the paper's
# Stanford CoreNLP as is installable; the parse stage first fetches stanza's English models with
# `depnmt models download en`, into $STANZA_RESOURCES_DIR or stanza's default folder, or the
# PARSE flags' --stanza-dir). SHARDS=N parses in N parallel shards;
# on a cluster run each `depnmt parse --shard i/N` on its own node, then `--merge`.
# Batches: MAX_TOKENS per process (default 4096) × UPDATE_FREQ (default 2); with torchrun set
# TRAIN_LAUNCH="torchrun --nproc_per_node 4 -m depnmt.cli" (see the README) and UPDATE_FREQ=1.
# Every stage is skipped when done; trainings resume.
set -euo pipefail
. "$(dirname "$0")/../lib/compare.sh"
usage="usage: bash recipes/wmt-en-de/run.sh [--until download|prepare|parse|bpe|train]"
read_until "$usage" "$@"
SETTING=${SETTING:-wmt16}
WORK=${DEPNMT_WORK:-work/wmt-en-de-$SETTING}
SRC_LANG=en TGT_LANG=de
SYSTEMS=${SYSTEMS:-abs pascal structural gps dep+rel}
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
COMMON=(--layers 6 --d-model 512 --heads 8 --d-ff 2048 --dropout "$DROPOUT" --label-smoothing 0.1
        --share-all-embeddings --lr 7e-4 --warmup 8000 --max-tokens "${MAX_TOKENS:-4096}"
        --update-freq "${UPDATE_FREQ:-2}" --max-steps "$STEPS" --valid-every 2000
        --valid-max-sentences 500 --beam "$BEAM" --alpha 0.6)

# download: the parallel corpora (cached in $WORK/download) and the newstest sets (sacrebleu)
D=$WORK/download
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
    sacrebleu -t "$set_name" -l en-de --echo src > "$D/$split.en"
    sacrebleu -t "$set_name" -l en-de --echo ref > "$D/$split.de"
  done
  touch "$D/done"
fi
stop_after download

done_stage "$WORK/prepare" || depnmt prepare --src-lang en --tgt-lang de \
  --train-src "$D/train.en" --train-tgt "$D/train.de" --dev-src "$D/dev.en" --dev-tgt "$D/dev.de" \
  --test-src "$D/test.en" --test-tgt "$D/test.de" --max-len 250 -o "$WORK/prepare"
stop_after prepare

sides=$(tree_sides $SYSTEMS)
TREES=${sides:+$WORK/parse}
[ -z "$sides" ] || parse_trees "$WORK/prepare" "$TREES" "$sides" "${parse_flags[@]}"
stop_after parse

DATA=$WORK/bpe
done_stage "$DATA" || depnmt bpe -i "$WORK/prepare" -o "$DATA" --joint --merges 32000
stop_after bpe

run_campaign "$WORK/runs" $SYSTEMS
stop_after train
report_systems "$WORK/runs" $SYSTEMS
