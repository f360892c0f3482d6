#!/usr/bin/env bash
# Every scheme and ablation of Omote et al. (Table 3) and the Japanese paper trains through
# `depnmt train` flags and translates raw text (the model's own parser runs for tree schemes),
# on real data: 15 updates of a tiny model each, then 30 test sentences. A check that nothing
# is broken on real trees, not a quality measurement. Prints one "ok"/"FAIL" line per system.
#
#   bash bench/smoke_schemes.sh       # after recipes/multi30k-en-de/run.sh and
#                                     # recipes/small-enja-ja-en/run.sh (their prepare/parse/bpe)
# M30K / ENJA: the work folders holding prepare/, parse/ and bpe/ (defaults: the recipes').
set -uo pipefail
M30K=${M30K:-work/multi30k-en-de}
ENJA=${ENJA:-work/small-enja-ja-en-20000}
OUT=${OUT:-work/smoke-schemes}
mkdir -p "$OUT"
head -n 30 "$M30K/prepare/test.raw.en" > "$OUT/in.en"
head -n 30 "$ENJA/prepare/test.raw.ja" > "$OUT/in.ja" 2>/dev/null || true
failed=0
run() {  # NAME WORK LANG FLAGS...
  local name=$1 work=$2 lang=$3; shift 3
  [ -s "$OUT/in.$lang" ] || { echo "skip $name (no $work)"; return; }
  rm -rf "$OUT/m-$name"
  if ! depnmt train -i "$work/bpe" -t "$work/parse" -o "$OUT/m-$name" --layers 2 \
       --d-model 64 --heads 4 --d-ff 128 --max-tokens 1024 --warmup 10 --lr 1e-3 --max-steps 15 \
       --valid-every 15 --valid-max-sentences 20 --log-every 5 --beam 1 "$@" \
       > "$OUT/$name.train.log" 2>&1; then
    echo "FAIL train $name: $(tail -1 "$OUT/$name.train.log")"; failed=1; return
  fi
  if ! depnmt translate -m "$OUT/m-$name" < "$OUT/in.$lang" > "$OUT/$name.hyp" 2> "$OUT/$name.tr.log"; then
    echo "FAIL translate $name: $(tail -1 "$OUT/$name.tr.log")"; failed=1; return
  fi
  local n_in n_out
  n_in=$(wc -l < "$OUT/in.$lang"); n_out=$(wc -l < "$OUT/$name.hyp")
  [ "$n_in" = "$n_out" ] || { echo "FAIL $name: $n_out output lines for $n_in"; failed=1; return; }
  echo "ok $name ($*): 15 updates, $n_out/$n_in lines translated"
}
run abs $M30K en --scheme abs
run rel $M30K en --scheme abs+rel
run dep $M30K en --scheme abs+dep
run dep+rel $M30K en --scheme abs+dep+rel
run deplabel $M30K en --scheme abs+deplabel
run deplabel+rel $M30K en --scheme abs+deplabel+rel
run dep-key $M30K en --scheme abs+dep --dep-terms key
run dep-value $M30K en --scheme abs+dep --dep-terms value
run dep-none $M30K en --scheme abs+dep --dep-terms none
run rel-key $M30K en --scheme abs+rel --rel-terms key
run rel-value $M30K en --scheme abs+rel --rel-terms value
run deplabel+rel-key $M30K en --scheme abs+deplabel+rel --deplabel-terms key --rel-terms key
run none $M30K en --scheme noabs
run rel-noabs $M30K en --scheme noabs+rel
run dep-noabs $M30K en --scheme noabs+dep
run dep+rel-noabs $M30K en --scheme noabs+dep+rel
run deplabel-noabs $M30K en --scheme noabs+deplabel
run dep-inherit $M30K en --scheme abs+dep --subword-tree inherit
run dep-chain-first $M30K en --scheme abs+dep --chain-head first
run ja-deplabel $ENJA ja --scheme abs+deplabel
run ja-deplabel+rel $ENJA ja --scheme abs+deplabel+rel
run ja-dep+rel $ENJA ja --scheme abs+dep+rel
exit $failed
