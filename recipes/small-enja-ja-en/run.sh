#!/usr/bin/env bash
# small_parallel_enja Ja→En (Tanaka corpus, pre-tokenized): every positional scheme of the
# papers — including DBSA(Dec), trained on English trees — with the same budget on this CPU,
# evaluated on its test set, and the results table (results.{md,json,png}).
#
#   bash recipes/small-enja-ja-en/run.sh
#   SYSTEMS="abs dbsa-enc dbsa-dec dbsa-enc+dec" bash recipes/small-enja-ja-en/run.sh
#   FIRST=50000 STEPS=2000 bash recipes/small-enja-ja-en/run.sh      # the whole corpus
#   MODE=word bash recipes/small-enja-ja-en/run.sh    # words, no BPE (DBSA paper's Table 3)
#   SEED=2 bash recipes/small-enja-ja-en/run.sh       # another seed: results in bpe-run-seed2/
#
# Budget (the default): the first 20,000 training pairs, 400 updates of ≤ 2,048 tokens per
# system, 3+3 layers, d_model 192, 4 heads, d_ff 768, greedy decoding (about 10 minutes per
# system on 2 CPU cores); results in $WORK/bpe-run/ (or $WORK/word/). Japanese trees: GiNZA (ja_ginza) on the corpus's own tokens; English:
# spaCy en_core_web_sm 3.8.0; both offline. Re-running skips what is done.
set -euo pipefail
. "$(dirname "$0")/../lib/compare.sh"
FIRST=${FIRST:-20000}
MODE=${MODE:-bpe}
WORK=${DEPNMT_WORK:-work/small-enja-ja-en-$FIRST}
SRC_LANG=ja TGT_LANG=en
SYSTEMS=${SYSTEMS:-$ALL_SYSTEMS}
STEPS=${STEPS:-400}
BEAM=${BEAM:-1}
DBSA_LAYER=${DBSA_LAYER:-2}          # the 4th of 6 layers in the paper; 2 of 3 here
COMMON=(--layers 3 --d-model 192 --heads 4 --d-ff 768 --lr 1e-3 --warmup $((STEPS / 2))
        --max-tokens 2048 --max-steps "$STEPS" --valid-every "$STEPS" --valid-max-sentences 200
        --log-every 20 --seed "$SEED")
for s in $SYSTEMS; do system_flags "$s"; done          # unknown names fail before any work

done_stage "$WORK/prepare" || depnmt prepare --corpus small_parallel_enja --src-lang ja \
  --tgt-lang en --first "$FIRST" -o "$WORK/prepare"
TREES=$WORK/parse
sides=$(tree_sides $SYSTEMS)
if [ -z "$sides" ]; then TREES=""
elif ! done_stage "$TREES"; then
  depnmt parse -i "$WORK/prepare" -o "$TREES" --side both --backend spacy
fi
case $MODE in
  word) DATA=$WORK/words OUT=$(seeded "$WORK/word")      # Table 3 "w/o BPE": words seen < 5 times -> <unk>
        done_stage "$DATA" || depnmt bpe -i "$WORK/prepare" -o "$DATA" --mode word --min-freq 5 ;;
  bpe)  DATA=$WORK/bpe OUT=$(seeded "$WORK/bpe-run")
        COMMON+=(--share-all-embeddings)
        done_stage "$DATA" || depnmt bpe -i "$WORK/prepare" -o "$DATA" --merges 4000 --joint ;;
  *) echo "error: MODE must be bpe or word, not '$MODE'" >&2; exit 2 ;;
esac
for s in $SYSTEMS; do run_system "$s"; done
report_systems $SYSTEMS
