#!/usr/bin/env bash
# Multi30k En→De: every positional scheme of the papers trained with the same protocol on this
# CPU, once per seed, evaluated on test_2016_flickr, and the results table (BLEU and chrF mean ±
# sd over seeds, every run, intervals and p-values against abs and abs+rel — approximate
# randomization over runs and paired bootstrap —, dev loss, epochs, tokens/s, parameters) —
# the small-scale analogue of the papers' Tables 2.
#
#   bash recipes/multi30k-en-de/compare.sh                   # every system, seed 1, converged
#   SEEDS="1 2 3" SYSTEMS="abs abs+rel abs+dep+rel abs+gps abs+pascal" bash recipes/multi30k-en-de/compare.sh
#   STEPS=400 bash recipes/multi30k-en-de/compare.sh        # quick: 400 updates per system
#   SEED=2 bash recipes/multi30k-en-de/compare.sh           # another seed alone
#   JOBS=2 SEEDS="1 2 3" bash recipes/multi30k-en-de/compare.sh  # 2 runs at once, 1 thread each
#
# Protocol (the default): trained to the dev plateau — validation every epoch, early stopping
# when dev token accuracy has not improved for PATIENCE=5 epochs, at most MAX_EPOCHS=30,
# the last AVERAGE=5 epochs' checkpoints averaged, beam 4 (α 0.6) on test; 3+3 layers,
# d_model 192, 4 heads, d_ff 768 (ARCH), batches of ≤ 2,048 tokens, warm-up 400, lr 1e-3.
# One converged run is about an hour on 2 CPU cores (the quickstart model: ~125 s per epoch).
# Results: $WORK/compare-plateau[-seedN]/{models,hyps}/ per seed; the table in
# compare-plateau/results.* (one seed) or compare-plateau-seeds-1-2-3/results.* (several).
# STEPS=N: N updates of every system, one validation, best.pt, greedy decoding (BEAM=1) —
# the earlier short budget (400 updates: 6–7 minutes per system), into $WORK/compare[-seedN]/.
# abs+dbsa-dec needs target (German) trees: there is no offline German parser here, so it is not
# in the default list; add it with SYSTEMS (both sides are then parsed into $WORK/parse-both
# with PARSE_BOTH, default "--backend stanza", after `depnmt models download en de` fetched
# stanza's models: needs internet once).
# SYSTEMS may add "multitask" (Currey & Heafield 2019's multi-task baseline: abs
# trained on translation mixed with parsing the source into linearized trees, task tags;
# `depnmt multitask`), a data-level baseline: $WORK/multitask and $WORK/multitask-bpe.
# Re-running skips what is done (stage manifests, finished models, written hypotheses) and
# resumes an interrupted training: stop a campaign at any time, run the same command again to
# continue it. Another STEPS, MAX_EPOCHS, ARCH, BEAM, ... needs another DEPNMT_WORK: a finished
# model or hypotheses made with other settings stop the recipe (one line naming the setting).
set -euo pipefail
. "$(dirname "$0")/../lib/compare.sh"
WORK=${DEPNMT_WORK:-work/multi30k-en-de}
SRC_LANG=en TGT_LANG=de
SYSTEMS=${SYSTEMS:-abs abs+rel abs+dep abs+dep+rel abs+deplabel abs+deplabel+rel abs+dbsa-enc abs+gps abs+gps-all abs+pascal abs+structural}
DBSA_LAYER=${DBSA_LAYER:-2}          # the 4th of 6 layers in the paper; 2 of 3 here
budget_flags
read -r -a arch <<< "${ARCH:---layers 3 --d-model 192 --heads 4 --d-ff 768}"
COMMON=("${arch[@]}" --share-all-embeddings --lr 1e-3 --max-tokens 2048 "${BUDGET[@]}"
        --valid-max-sentences 200 --log-every 20)
for s in $SYSTEMS; do system_flags "$s"; done          # unknown names fail before any work

done_stage "$WORK/prepare" || depnmt prepare --corpus multi30k --src-lang en --tgt-lang de -o "$WORK/prepare"
case $(tree_sides $SYSTEMS) in
  src) TREES=$WORK/parse
       done_stage "$TREES" || depnmt parse -i "$WORK/prepare" -o "$TREES" --side src --backend spacy ;;
  tgt|both) TREES=$WORK/parse-both
       read -r -a parse_both <<< "${PARSE_BOTH:---backend stanza}"
       parse_trees "$WORK/prepare" "$TREES" both "${parse_both[@]}" ;;   # fetches stanza's models
  *) TREES="" ;;
esac
done_stage "$WORK/bpe" || depnmt bpe -i "$WORK/prepare" -o "$WORK/bpe" --merges 8000 --joint
[[ " $SYSTEMS " != *" multitask "* ]] || multitask_data "$WORK/prepare" "$TREES" --merges 8000 --joint

run_campaign "$WORK/compare$TAG" $SYSTEMS
report_systems "$WORK/compare$TAG" $SYSTEMS
