#!/usr/bin/env bash
# Multi30k En→De, the abs baseline, end to end on a CPU:
# prepare → parse → bpe → train → translate → score. Prints the test_2016_flickr BLEU.
#
#   bash recipes/multi30k-en-de/run.sh                 # 4,000 updates, seed 1
#   DEPNMT_SEED=2 bash recipes/multi30k-en-de/run.sh   # another seed, same data (model-seed2)
#   DEPNMT_UPDATES=1000 bash recipes/multi30k-en-de/run.sh
#   DEPNMT_WORK=/data/run1 bash recipes/multi30k-en-de/run.sh
#
# The training budget is a number of updates, not minutes, so the score is the same on every
# machine (up to floating-point differences between CPUs); DEPNMT_MINUTES adds a wall-clock cap.
#
# Re-running skips the stages that already finished (their manifest.json exists) and resumes
# training from its last checkpoint; a finished model is reused only when it was trained with
# these settings (another DEPNMT_UPDATES or DEPNMT_MINUTES needs another DEPNMT_WORK). Multi30k
# is read from ../shared/data when present and downloaded from its public home otherwise; the
# English parser (spaCy en_core_web_sm 3.8.0) works offline.
set -euo pipefail
WORK=${DEPNMT_WORK:-work/multi30k-en-de}
UPDATES=${DEPNMT_UPDATES:-4000}
MINUTES=${DEPNMT_MINUTES:-0}
SEED=${DEPNMT_SEED:-1}
MODEL=$WORK/model
HYP=$WORK/test_2016_flickr.hyp.de
[ "$SEED" = 1 ] || { MODEL=$WORK/model-seed$SEED; HYP=$WORK/test_2016_flickr.seed$SEED.hyp.de; }
done_stage() { [ -f "$1/manifest.json" ]; }

done_stage "$WORK/prepare" || depnmt prepare --corpus multi30k --src-lang en --tgt-lang de -o "$WORK/prepare"
done_stage "$WORK/parse"   || depnmt parse -i "$WORK/prepare" -o "$WORK/parse" --side src --backend spacy
done_stage "$WORK/bpe"     || depnmt bpe -i "$WORK/prepare" -o "$WORK/bpe" --merges 8000 --joint

train=(train -i "$WORK/bpe" -t "$WORK/parse" -o "$MODEL"
  --scheme abs --layers 3 --d-model 192 --heads 4 --d-ff 768 --dropout 0.1
  --share-all-embeddings --lr 1e-3 --warmup 400 --max-tokens 2048
  --max-steps "$UPDATES" --max-minutes "$MINUTES" --seed "$SEED" --valid-max-sentences 400)
resume=()
[ -f "$MODEL/checkpoints/last.pt" ] && resume=(--resume)
if done_stage "$MODEL"; then   # a model trained with other settings (DEPNMT_UPDATES): refused
  depnmt "${train[@]}" --check-settings
else
  depnmt "${train[@]}" "${resume[@]}"
fi

depnmt translate -m "$MODEL" -i "$WORK/prepare/test.raw.en" -o "$HYP"
depnmt score --ref "$WORK/prepare/test.raw.de" --metrics bleu,chrf "$HYP"
