#!/usr/bin/env bash
# Multi30k En→De, Transformer_abs baseline, end to end on a CPU:
# prepare → parse → bpe → train → translate → score. Prints the test_2016_flickr BLEU.
#
#   bash recipes/multi30k-en-de/run.sh            # ~25 minutes on 2 CPU cores (20 training)
#   DEPNMT_MINUTES=5 bash recipes/multi30k-en-de/run.sh
#   DEPNMT_WORK=/data/run1 bash recipes/multi30k-en-de/run.sh
#
# Re-running skips the stages that already finished (their manifest.json exists) and resumes
# training from its last checkpoint. Multi30k is read from ../shared/data when present and
# downloaded from its public home otherwise; the English parser (spaCy en_core_web_sm 3.8.0)
# works offline.
set -euo pipefail
WORK=${DEPNMT_WORK:-work/multi30k-en-de}
MINUTES=${DEPNMT_MINUTES:-20}
done_stage() { [ -f "$1/manifest.json" ]; }

done_stage "$WORK/prepare" || depnmt prepare --corpus multi30k --src-lang en --tgt-lang de -o "$WORK/prepare"
done_stage "$WORK/parse"   || depnmt parse -i "$WORK/prepare" -o "$WORK/parse" --side src --backend spacy
done_stage "$WORK/bpe"     || depnmt bpe -i "$WORK/prepare" -o "$WORK/bpe" --merges 8000 --joint

resume=()
[ -f "$WORK/model/checkpoints/last.pt" ] && resume=(--resume)
done_stage "$WORK/model" || depnmt train --data "$WORK/bpe" --trees "$WORK/parse" -o "$WORK/model" \
  --scheme Transformer_abs --layers 3 --d-model 192 --heads 4 --d-ff 768 --dropout 0.1 \
  --share-all-embeddings --lr 1e-3 --warmup 400 --max-tokens 2048 \
  --max-minutes "$MINUTES" --valid-max-sentences 400 "${resume[@]}"

depnmt translate -m "$WORK/model" -i "$WORK/prepare/test.raw.en" > "$WORK/test_2016_flickr.hyp.de"
depnmt score --ref "$WORK/prepare/test.raw.de" --metrics bleu,chrf "$WORK/test_2016_flickr.hyp.de"
