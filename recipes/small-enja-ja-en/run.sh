#!/usr/bin/env bash
# small_parallel_enja Ja→En (Tanaka corpus, pre-tokenized): every positional scheme of the
# papers — including DBSA(Dec), trained on English trees — with the same budget on this CPU,
# evaluated on its test set, and the results table (results.{md,json,png}).
#
#   bash recipes/small-enja-ja-en/run.sh
#   SYSTEMS="abs abs+dbsa-enc abs+dbsa-dec abs+dbsa-enc+dbsa-dec" bash recipes/small-enja-ja-en/run.sh
#   SEEDS="1 2 3" SYSTEMS="abs abs+rel abs+dep+rel abs+dbsa-enc+dbsa-dec" bash recipes/small-enja-ja-en/run.sh
#   FIRST=50000 bash recipes/small-enja-ja-en/run.sh  # the whole corpus
#   MODE=word bash recipes/small-enja-ja-en/run.sh    # words, no BPE (DBSA paper's Table 3)
#   STEPS=400 bash recipes/small-enja-ja-en/run.sh    # quick: 400 updates per system
#   SEED=2 bash recipes/small-enja-ja-en/run.sh       # another seed alone
#   CONTROL=random-projective SEEDS="1 2 3" SYSTEMS=abs+dep+rel bash recipes/small-enja-ja-en/run.sh
#
# CONTROL=KIND trains on control trees instead of the parser's (`depnmt controls --kind KIND
# --seed CONTROL_SEED` (1) over both sides of $WORK/parse, into $WORK/parse-control-KIND; the
# labels of CONTROL_LABELS, default keep): results in $WORK/bpe-run-control-KIND…/, beside the
# real-tree runs; give it its own ARCHIVE. `translate` applies the same control to the test
# sources, so the comparison with the real-tree runs asks whether the tree itself helps.
#
# Data: the first 20,000 training pairs (FIRST). Protocol (the default), as
# recipes/multi30k-en-de/compare.sh: trained to the dev plateau (validation every epoch, early
# stopping on dev token accuracy with PATIENCE=5, at most MAX_EPOCHS=30), the last AVERAGE=5
# checkpoints averaged, beam 4 (α 0.6); 3+3 layers, d_model 192, 4 heads, d_ff 768 (ARCH),
# batches of ≤ 2,048 tokens. Results per seed in $WORK/bpe-run-plateau[-seedN]/ (or
# $WORK/word-plateau…); the table there (one seed) or in bpe-run-plateau-seeds-1-2-3/.
# STEPS=N: N updates per system, greedy (about 10 minutes per system for 400), into
# $WORK/bpe-run[-seedN]/. Japanese trees: GiNZA (ja_ginza) on the corpus's own tokens;
# English: spaCy en_core_web_sm 3.8.0; both offline. Re-running skips what is done and
# resumes interrupted trainings, so a campaign can be stopped and continued.
# ARCHIVE=DIR keeps every finished run without checkpoints in DIR (`depnmt archive`) and the
# data's identity in DIR/data.json (options, parser versions, sha256 of every prepare/parse/bpe
# file). On another machine: cp -r DIR/. "$WORK"/ and run the same command with the same
# ARCHIVE; the data stages are remade and must match DIR/data.json before anything is trained
# (else one line names the first differing file), and the archived runs count as finished.
set -euo pipefail
. "$(dirname "$0")/../lib/compare.sh"
FIRST=${FIRST:-20000}
MODE=${MODE:-bpe}
WORK=${DEPNMT_WORK:-work/small-enja-ja-en-$FIRST}
SRC_LANG=ja TGT_LANG=en
# the keep tokenizer reads references as tokens: the test likelihood scores prepare's tokenized
# test.en (its test.raw.en is detokenized)
LIKELIHOOD_REF=${LIKELIHOOD_REF:-${TEST_REF:-$WORK/prepare/test.$TGT_LANG}}
SYSTEMS=${SYSTEMS:-$ALL_SYSTEMS}
DBSA_LAYER=${DBSA_LAYER:-2}          # the 4th of 6 layers in the paper; 2 of 3 here
budget_flags
read -r -a arch <<< "${ARCH:---layers 3 --d-model 192 --heads 4 --d-ff 768}"
COMMON=("${arch[@]}" --lr 1e-3 --max-tokens 2048 "${BUDGET[@]}" --valid-max-sentences 200
        --log-every 20)
for s in $SYSTEMS; do system_flags "$s"; done          # unknown names fail before any work

done_stage "$WORK/prepare" || depnmt prepare --corpus small_parallel_enja --src-lang ja \
  --tgt-lang en --first "$FIRST" -o "$WORK/prepare"
TREES=$WORK/parse
sides=$(tree_sides $SYSTEMS)
if [ -z "$sides" ]; then TREES=""
elif ! done_stage "$TREES"; then
  depnmt parse -i "$WORK/prepare" -o "$TREES" --side both --backend spacy
fi
if [ -n "${CONTROL:-}" ]; then
  [ -n "$sides" ] || { echo "error: CONTROL=$CONTROL: none of SYSTEMS uses trees" >&2; exit 2; }
  control=$WORK/parse-control-$CONTROL
  # a folder made with another CONTROL_SEED or CONTROL_LABELS is refused (done_stage), not reused
  done_stage "$control" control.seed="${CONTROL_SEED:-1}" \
      control.labels="${CONTROL_LABELS:-keep}" ||
    depnmt controls -i "$TREES" -o "$control" --kind "$CONTROL" \
      --seed "${CONTROL_SEED:-1}" --labels "${CONTROL_LABELS:-keep}" --side both
  TREES=$control TAG="-control-$CONTROL$TAG"
fi
case $MODE in
  word) DATA=$WORK/words BASE=$WORK/word$TAG          # Table 3 "w/o BPE": words seen < 5 times -> <unk>
        done_stage "$DATA" || depnmt bpe -i "$WORK/prepare" -o "$DATA" --mode word --min-freq 5 ;;
  bpe)  DATA=$WORK/bpe BASE=$WORK/bpe-run$TAG
        COMMON+=(--share-all-embeddings)
        done_stage "$DATA" || depnmt bpe -i "$WORK/prepare" -o "$DATA" --merges 4000 --joint ;;
  *) echo "error: MODE must be bpe or word, not '$MODE'" >&2; exit 2 ;;
esac
run_campaign "$BASE" $SYSTEMS
report_systems "$BASE" $SYSTEMS
