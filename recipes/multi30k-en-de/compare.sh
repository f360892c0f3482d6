#!/usr/bin/env bash
# Multi30k En→De: every positional scheme of the papers trained with the same budget and
# settings on this CPU, evaluated on test_2016_flickr, and the results table (BLEU, chrF,
# paired bootstrap p-values against abs and rel, training time, tokens/s, parameters) written
# to $WORK/compare/results.{md,json,png} — the small-scale analogue of the papers' Tables 2.
#
#   bash recipes/multi30k-en-de/compare.sh                  # all systems (see the budget below)
#   SYSTEMS="abs rel dep dep+rel" bash recipes/multi30k-en-de/compare.sh
#   STEPS=2000 DEPNMT_WORK=/data/m30k bash recipes/multi30k-en-de/compare.sh
#   SEED=2 bash recipes/multi30k-en-de/compare.sh          # another seed: $WORK/compare-seed2
#
# Budget (the default): 400 updates of ≤ 2,048 tokens for every system, 3+3 layers, d_model
# 192, 4 heads, d_ff 768, greedy decoding: 6–7 minutes per system on 2 CPU cores (all 11: ≈ 77 min).
# DBSA(Dec) needs target (German) trees: there is no offline German parser here, so it is not
# in the default list; add it with SYSTEMS (both sides are then parsed into $WORK/parse-both
# with PARSE_BOTH, default "--backend stanza", after `depnmt models download en de` fetched
# stanza's models: needs internet once).
# Re-running skips what is done (stage manifests, finished
# models, written hypotheses) and resumes an interrupted training.
set -euo pipefail
. "$(dirname "$0")/../lib/compare.sh"
WORK=${DEPNMT_WORK:-work/multi30k-en-de}
SRC_LANG=en TGT_LANG=de
SYSTEMS=${SYSTEMS:-abs rel dep dep+rel deplabel deplabel+rel dbsa-enc gps gps-all pascal structural}
STEPS=${STEPS:-400}
BEAM=${BEAM:-1}
DBSA_LAYER=${DBSA_LAYER:-2}          # the 4th of 6 layers in the paper; 2 of 3 here
COMMON=(--layers 3 --d-model 192 --heads 4 --d-ff 768 --share-all-embeddings --lr 1e-3
        --warmup $((STEPS / 2)) --max-tokens 2048 --max-steps "$STEPS" --valid-every "$STEPS"
        --valid-max-sentences 200 --log-every 20 --seed "$SEED")
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

OUT=$(seeded "$WORK/compare")
for s in $SYSTEMS; do run_system "$s"; done
report_systems $SYSTEMS
