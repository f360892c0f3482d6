#!/usr/bin/env bash
# WAT'18 ASPEC-JE, the seeds' main corpus, on one GPU (the CPU works but takes weeks).
#
#   bash recipes/aspec-ja-en/run.sh /data/ASPEC                 # every stage, every system
#   SETTING=dbsa bash recipes/aspec-ja-en/run.sh /data/ASPEC    # Deguchi et al. 2019's setting
#   SETTING=omote-ablation bash recipes/aspec-ja-en/run.sh /data/ASPEC   # Omote's Table 3
#   SETTING=nlp2019 bash recipes/aspec-ja-en/run.sh /data/ASPEC # En→Ja, Omote et al. NLP2019
#   bash recipes/aspec-ja-en/run.sh /data/ASPEC --until bpe     # stop after a stage
#   SYSTEMS="abs dep" bash recipes/aspec-ja-en/run.sh /data/ASPEC
#
# ASPEC is licensed: obtain it from its distributor and give the folder holding ASPEC-JE/
# (train/train-{1,2}.txt, dev/dev.txt, test/test.txt); without it the recipe names the missing
# files and exits with status 2. Settings (SETTING):
#   omote           Ja→En, Omote et al. (RANLP 2019) §5.1: the first 1.5M pairs, training pairs
#                   of ≤ 50 words per side, word vocabularies of words seen ≥ 7 (ja) / ≥ 10 (en)
#                   times, 30 epochs, batches of ~256 sentences, greedy decoding;
#                   abs, abs+rel, abs+dep, abs+dep+rel, abs+deplabel, abs+deplabel+rel
#   dbsa            Ja→En, Deguchi et al. (2019) §4.1: joint BPE with a 100k vocabulary,
#                   ≤ 250 subwords, 20 epochs, ~224 sentences, beam 4 with α = 0.6;
#                   abs and the DBSA variants
#   omote-ablation  Ja→En, Omote et al.'s Table 3: the first 100,000 pairs of ≤ 50 words of
#                   train-1 (MAX_PAIRS; FIRST=150000 pairs are read for it), word vocabularies
#                   of words seen ≥ 2 times, batches of 100 sentences (--batch-sentences), 50
#                   epochs, greedy; no absolute PE: noabs+dep (b^K and b^V), noabs+dep-bV,
#                   noabs+dep-bK, noabs (neither), against noabs+dep
#   nlp2019         En→Ja, Omote et al.'s NLP2019 paper §4: 100,000 training pairs, k = 2,
#                   batches of 100 sentences, 50 epochs; abs, abs+rel, abs+deplabel (method
#                   1), abs+deplabel+rel (method 2). English source trees (spaCy en_core_web_sm; PARSE
#                   for stanza; the paper: Stanford CoreNLP), Japanese target by Sudachi (the
#                   paper: KyTea). The paper states neither the filter nor the vocabulary nor
#                   the decoding: as omote-ablation (≤ 50 words, words seen ≥ 2 times, greedy).
#                   BLEU on the detokenized Japanese (Sudachi tokens joined, as `translate`
#                   writes them, against the untokenized references) with sacreBLEU's ja-mecab
#                   tokenizer (MeCab + IPAdic, offline from PyPI: sacrebleu[ja]; sacreBLEU's
#                   default for a Japanese target); the signature in results.md says
#                   tok:ja-mecab-….
# Stages, each skipped when its manifest.json exists (so re-running resumes, trainings included):
#   extract  the first FIRST pairs of train-1 + train-2, dev.txt (1,790), test.txt (1,812)
#   prepare  Sudachi (mode C, as GiNZA) for Japanese, Moses for English, the setting's filters
#   parse    GiNZA for Japanese, spaCy en_core_web_sm for English (when a system needs its
#            trees); PARSE="--backend stanza" for stanza (its models are fetched first with
#            `depnmt models download`). SHARDS=N parses in N parallel shards and merges them —
#            on a cluster, run each `depnmt parse --shard i/N` on its own node, then
#            `depnmt parse --merge`
#            DATA_JOBS=N runs prepare, parse and bpe in N worker processes (their --jobs;
#            default auto, one per core; each parse process loads its own GiNZA/spaCy
#            model); the data is the same for any N
#   bpe      word vocabularies (omote, omote-ablation, nlp2019) or joint BPE (dbsa)
#   train    every system of SYSTEMS with the papers' hyper-parameters: 6+6 layers, 8 heads,
#            d_model 512, d_ff 2048 (ARCH overrides them), Adam (0.9, 0.98, 1e-9), 4,000
#            warm-up steps, k = l = 2, label smoothing 0.1, dropout 0.1; best dev BLEU checkpoint
#   report   the results table: results.{md,json,png} in $WORK/runs
set -euo pipefail
. "$(dirname "$0")/../lib/compare.sh"
usage="usage: bash recipes/aspec-ja-en/run.sh ASPEC_DIR [--until extract|prepare|parse|bpe|train]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
ASPEC=$1; shift
read_until "$usage" "$@"
SETTING=${SETTING:-omote}
WORK=${DEPNMT_WORK:-work/aspec-ja-en-$SETTING}
DATA_JOBS=${DATA_JOBS:-auto}
DBSA_LAYER=${DBSA_LAYER:-4}
SRC_LANG=ja TGT_LANG=en
BATCH=(); MIN_FREQ=(); BASELINES="abs abs+rel rel"   # (rel: the 0.1.0 name of abs+rel)
PAIRS=""                                              # prepare's --max-pairs, when given
case $SETTING in
  omote) SYSTEMS=${SYSTEMS:-abs abs+rel abs+dep abs+dep+rel abs+deplabel abs+deplabel+rel}
         BEAM=${BEAM:-1}; EPOCHS=${EPOCHS:-30}; MAX_TOKENS=${MAX_TOKENS:-8192}
         FIRST=${FIRST:-1500000}; PREPARE_FILTER=(--max-len 50)
         MIN_FREQ=(--src-min-freq 7 --tgt-min-freq 10) ;;
  dbsa)  SYSTEMS=${SYSTEMS:-abs abs+dbsa-enc abs+dbsa-dec abs+dbsa-enc+dbsa-dec}
         BEAM=${BEAM:-4}; EPOCHS=${EPOCHS:-20}; MAX_TOKENS=${MAX_TOKENS:-8192}
         FIRST=${FIRST:-1500000}; PREPARE_FILTER=() ;;
  omote-ablation|nlp2019)
         if [ "$SETTING" = nlp2019 ]; then
           SRC_LANG=en TGT_LANG=ja
           SYSTEMS=${SYSTEMS:-abs abs+rel abs+deplabel abs+deplabel+rel}
         else
           SYSTEMS=${SYSTEMS:-$ABLATION_SYSTEMS}; BASELINES="noabs+dep dep-noabs"
         fi
         # batches of exactly 100 sentences: 100 × (50 words + EOS/BOS) stays within 8,192
         BEAM=${BEAM:-1}; EPOCHS=${EPOCHS:-50}; MAX_TOKENS=${MAX_TOKENS:-8192}
         BATCH=(--batch-sentences "${BATCH_SENTENCES:-100}")
         FIRST=${FIRST:-150000}; PAIRS=${MAX_PAIRS:-100000}
         PREPARE_FILTER=(--max-len 50 --max-pairs "$PAIRS")
         MIN_FREQ=(--min-freq 2) ;;
  *) echo "error: SETTING must be omote, dbsa, omote-ablation or nlp2019, not '$SETTING'" >&2
     exit 2 ;;
esac
read -r -a parse_flags <<< "${PARSE:---backend spacy}"
read -r -a arch <<< "${ARCH:---layers 6 --d-model 512 --heads 8 --d-ff 2048}"
for s in $SYSTEMS; do system_flags "$s"; done          # unknown names fail before any work
COMMON=("${arch[@]}" --dropout 0.1 --label-smoothing 0.1
        --lr 7e-4 --warmup "${WARMUP:-4000}" --max-tokens "$MAX_TOKENS" "${BATCH[@]}"
        --max-epochs "$EPOCHS" --max-len 250 --rel-k 2 --dep-l 2 --deplabel-k 2 --beam "$BEAM"
        --alpha 0.6)

# extract: checks the ASPEC folder first (a clear error naming the missing files); a work
# folder made with another FIRST or MAX_PAIRS is refused (done_stage), not reused
done_stage "$WORK/extract" first="$FIRST" ||
  python -m depnmt.stages.aspec "$ASPEC" "$WORK/extract" --first "$FIRST"
stop_after extract

E=$WORK/extract
S=$SRC_LANG T=$TGT_LANG
done_stage "$WORK/prepare" max_pairs="$PAIRS" || depnmt prepare --src-lang "$S" --tgt-lang "$T" \
  --train-src "$E/train.$S" --train-tgt "$E/train.$T" --dev-src "$E/dev.$S" --dev-tgt "$E/dev.$T" \
  --test-src "$E/test.$S" --test-tgt "$E/test.$T" "${PREPARE_FILTER[@]}" --jobs "$DATA_JOBS" \
  -o "$WORK/prepare"
stop_after prepare

sides=$(tree_sides $SYSTEMS)
TREES=${sides:+$WORK/parse}
[ -z "$sides" ] || parse_trees "$WORK/prepare" "$TREES" "$sides" "${parse_flags[@]}"
stop_after parse

if [ "$SETTING" = dbsa ]; then
  DATA=$WORK/bpe
  done_stage "$DATA" || depnmt bpe -i "$WORK/prepare" -o "$DATA" --joint --merges 100000 --jobs "$DATA_JOBS"
else
  DATA=$WORK/words
  done_stage "$DATA" || depnmt bpe -i "$WORK/prepare" -o "$DATA" --mode word "${MIN_FREQ[@]}" \
    --jobs "$DATA_JOBS"
fi
stop_after bpe

run_campaign "$WORK/runs" $SYSTEMS
stop_after train
report_systems "$WORK/runs" $SYSTEMS
