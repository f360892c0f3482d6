# Shared by the comparison recipes (sourced, not run): the systems of the papers with their
# `depnmt train` flags, and the train → translate → report loop, each step skipped when done.
#
# The caller sets: WORK (work folder with prepare/), DATA (the `depnmt bpe` folder; default
# $WORK/bpe), OUT (where models/, hyps/ and results.* go; default $WORK), TREES (the parse
# folder, or empty when no system needs trees), SRC_LANG, TGT_LANG,
# SYSTEMS (names below), COMMON (array: the flags every system shares — model size and budget),
# DBSA_LAYER (the 1-based layer of DBSA's parse heads: the papers' 4th of 6), BEAM,
# and optionally TEST_SRC / TEST_REF (default: $WORK/prepare/test.raw.{src,tgt}), ALPHA (0.6),
# AVERAGE (average the last AVERAGE kept checkpoints before translating; 0 = best.pt) and
# LIKELIHOOD_REF (the references whose likelihood each run keeps, parallel to the test source:
# default TEST_REF; a recipe whose target tokenizer reads tokens (keep) gives prepare's
# tokenized test file, so that the references are split as in training).
#
# Test likelihood: after translating, each run scores the test references with the checkpoint
# that translated (`depnmt rescore`) into HYP.ref-logprob beside its hypotheses HYP: a header,
# then per sentence logprob TAB tokens TAB words (depnmt/decoding/likelihood.py). `depnmt report`
# compares the systems on it (test NLL per word and per subword); `depnmt archive` keeps it,
# since it cannot be computed without the checkpoints.
#
# Replicates: SEEDS="1 2 3" trains every system once per seed (SEED=N alone is SEEDS="N");
# run_campaign does it seed by seed, so the first replicate of every system is complete first.
# JOBS=N runs N of these (seed, system) runs at once, each with OMP_NUM_THREADS = cores / N
# (unless OMP_NUM_THREADS is set): on a small CPU two 1-thread trainings get through more
# tokens together than one 2-thread training (1.14-1.45x: docs/performance.md).
# Everything is skipped when done and an interrupted training resumes, so a campaign can be
# stopped at any moment and continued by running the same command again. What is done is
# reused only when it was made with the settings the recipe would make it with now: a data
# stage's options (done_stage), a finished model's training flags (`depnmt train
# --check-settings`: STEPS, MAX_EPOCHS/EPOCHS, ARCH, LR, MAX_TOKENS, the system's flags, ...),
# and the hypotheses' checkpoint, BEAM, ALPHA, test source and model (HYP.settings beside them,
# decoding_settings); else the recipe stops with one line naming the setting and both values,
# exit 2: give other settings another work folder (DEPNMT_WORK).
# ARCHIVE=DIR: after each run, `depnmt archive` its results folder into DIR (the finished runs'
# configs, logs and hypotheses without checkpoints: what the table is computed from, and
# DIR/data.json: the sha256 of every file of the data stages they were trained on, with the
# stages' options and parser versions). To continue the campaign on another machine, copy DIR's
# folders into a new work folder (cp -r DIR/. WORK/) and run the same command with the same
# ARCHIVE: the recipe remakes the data stages there, checks them against DIR/data.json before
# anything is trained (check_data: a difference stops it, naming the first differing file), and
# counts the archived runs as finished (nothing is trained or translated again).

# System names are the scheme names of `depnmt train --scheme` (abs or noabs, then parts joined
# by '+'), also the model folders' names and the report's labels.
ALL_SYSTEMS="abs abs+rel abs+dep abs+dep+rel abs+deplabel abs+deplabel+rel abs+dbsa-enc abs+dbsa-dec abs+dbsa-enc+dbsa-dec abs+gps abs+gps-all abs+pascal abs+structural"
# Omote et al. (RANLP 2019) Table 3: dep without the absolute PE (noabs+dep), with both b^K and
# b^V, b^V only, b^K only, and neither (= abs without its PE).
ABLATION_SYSTEMS="noabs+dep noabs+dep-bV noabs+dep-bK noabs"
# Baselines beyond the papers' own tables: LISA (Strubell et al. 2018) as the PASCAL fork runs it
# for MT, Currey & Heafield's (2019) multi-task data (a recipe system: abs on other data),
# Sennrich & Haddow's (2016) source factors, and treedist (no paper; it shows a scheme is one module).
BASELINE_SYSTEMS="abs+lisa multitask abs+factors abs+factors-concat abs+treedist"

# The 0.1.0 system names (deprecated, they go in 0.3.0): name -> today's name, and the flags
# that keep its 0.1.0 behaviour (DBSA's chain head was `first`; gps-N counted layers from 0).
# A run keeps the folder of the name it was started with.
declare -A OLD_SYSTEMS=(
  [rel]=abs+rel [dep]=abs+dep [dep+rel]=abs+dep+rel [deplabel]=abs+deplabel
  [deplabel+rel]=abs+deplabel+rel [pascal]=abs+pascal [structural]=abs+structural
  [treedist]=abs+treedist [factors]=abs+factors [factors-concat]=abs+factors-concat
  [gps]=abs+gps [gps-all]=abs+gps-all [dbsa-enc]=abs+dbsa-enc [dbsa-dec]=abs+dbsa-dec
  [dbsa-enc+dec]=abs+dbsa-enc+dbsa-dec [lisa]=abs+lisa [dep-noabs]=noabs+dep
  [dep-noabs-bV]=noabs+dep-bV [dep-noabs-bK]=noabs+dep-bK)
for _i in 0 1 2 3 4 5 6 7 8 9; do OLD_SYSTEMS[gps-$_i]=abs+gps-layer$((_i + 1)); done
OLD_DBSA="dbsa-enc dbsa-dec dbsa-enc+dec lisa"
# the parts a system name joins after abs or noabs (`depnmt train --help` lists them)
SCHEME_PARTS="rel dep dep-bV dep-bK deplabel dbsa-enc dbsa-dec lisa gps gps-all pascal structural treedist factors factors-concat"
WARNED_SYSTEMS=" "

# whole_number NAME MIN [auto]: stop with one line (exit 2) unless the setting NAME, when set,
# is a whole number of at least MIN (or "auto" when allowed); checked before any work, so a
# typo is not a bash error halfway through a campaign.
whole_number() {
  local name=$1 min=$2 value values
  read -r -a values <<< "${!1:-}"   # SEEDS holds several (split, never globbed)
  for value in ${values[@]+"${values[@]}"}; do
    [ "$value" = auto ] && [ "${3:-}" = auto ] && continue
    if ! [[ $value =~ ^[0-9]+$ ]] || [ "$((10#$value))" -lt "$min" ]; then
      echo "error: $name=${!1}: expected ${3:+auto or }a whole number, at least $min" >&2
      exit 2
    fi
  done
}
for _n in JOBS STEPS MAX_EPOCHS EPOCHS BEAM SHARDS FIRST MAX_TOKENS; do whole_number $_n 1; done
for _n in SEED SEEDS PATIENCE WARMUP AVERAGE VALID_EVERY; do whole_number $_n 0; done
whole_number DATA_JOBS 1 auto
if [ -n "${ALPHA:-}" ] && ! [[ $ALPHA =~ ^([0-9]+(\.[0-9]*)?|\.[0-9]+)$ ]]; then
  echo "error: ALPHA=$ALPHA: expected a number, at least 0 (e.g. 0.6)" >&2
  exit 2
fi

# done_stage DIR [KEY=VALUE...]: whether the stage writing DIR is done (DIR/manifest.json
# exists), so that a re-run skips it. Each KEY=VALUE is a setting the recipe makes DIR with:
# KEY an option the manifest records ("first", "control.seed": a key of its "options"), VALUE
# the setting's value now. A DIR made with another value stops the recipe with one line naming
# both (exit 2) instead of being skipped: every later stage would be skipped as done too, or
# made from DIR, and the results would be those of the other setting (same_settings).
done_stage() {
  local dir=$1
  shift
  [ -f "$dir/manifest.json" ] || return 1
  [ $# -eq 0 ] || same_settings "$dir/manifest.json" "$dir" "$dir and the folders made from it" "$@"
}

# same_settings RECORD WHAT REMOVE KEY=VALUE...: RECORD (JSON) records under "options" the
# settings WHAT was made with (nested keys joined by dots); each KEY must have VALUE there (an
# option left out: the empty VALUE), else the recipe stops with one line naming WHAT, KEY and
# both values and what to do (another work folder, or remove REMOVE), exit 2.
same_settings() {
  python - "$@" <<'PY' || exit 2
import json, sys
record, what, remove, settings = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
options = json.load(open(record, encoding="utf-8")).get("options") or {}
for setting in settings:
    key, _, now = setting.partition("=")
    was = options
    for part in key.split("."):
        was = was.get(part) if isinstance(was, dict) else None
    was = "" if was is None else json.dumps(was) if isinstance(was, bool) else str(was)
    if was != now:
        sys.exit(f"error: {what} was made with {key} {was or 'unset'}, not {now or 'unset'}: "
                 f"give another setting another work folder (DEPNMT_WORK), or remove {remove}")
PY
}

# record_settings RECORD KEY=VALUE...: write RECORD, the JSON object {"options": {KEY: VALUE}}
# that same_settings reads (every VALUE a string).
record_settings() { rm -f "$1"; add_settings "$@"; }

# add_settings RECORD KEY=VALUE...: RECORD (a record_settings file; none: a new one) with these
# settings added or replaced, the others kept; written atomically.
add_settings() {
  python - "$@" <<'PY'
import json, os, sys
record, settings = sys.argv[1], dict(s.partition("=")[::2] for s in sys.argv[2:])
data = {"options": {}}
if os.path.exists(record):
    with open(record, encoding="utf-8") as fh:
        data = json.load(fh)
data.setdefault("options", {}).update(settings)
with open(f"{record}.tmp", "w", encoding="utf-8") as out:
    json.dump(data, out, indent=1)
os.replace(f"{record}.tmp", record)
PY
}

# seeded DIR: DIR for SEED=1 (the default), DIR-seedN for SEED=N — so that runs with other
# seeds sit side by side (at the CPU budgets one run's BLEU noise exceeds most scheme differences).
SEED=${SEED:-1}
SEEDS=${SEEDS:-$SEED}
seeded() { local seed=${2:-$SEED}; if [ "$seed" = 1 ]; then echo "$1"; else echo "$1-seed$seed"; fi; }

# budget_flags: sets BUDGET (array: training budget and model selection), TAG, BEAM and AVERAGE.
#   STEPS=N (quick smoke runs): N updates, one validation at the end, best.pt, greedy
#     (BEAM=1); results in the untagged folders (e.g. compare/).
#   default (converged, Omote et al.'s selection): validation every epoch, early stopping when
#     dev token accuracy (METRIC=acc) has not improved for PATIENCE=5 validations, at most
#     MAX_EPOCHS=30 epochs, warm-up WARMUP=400, the last AVERAGE=5 validations' checkpoints
#     kept and averaged for translation, beam 4, α 0.6; results in "-plateau" folders.
budget_flags() {
  if [ -n "${STEPS:-}" ]; then
    BUDGET=(--warmup $((STEPS / 2)) --max-steps "$STEPS" --valid-every "$STEPS")
    TAG="" BEAM=${BEAM:-1} AVERAGE=${AVERAGE:-0}
  else
    AVERAGE=${AVERAGE:-5}
    BUDGET=(--warmup "${WARMUP:-400}" --max-epochs "${MAX_EPOCHS:-30}" --valid-every 0
            --patience "${PATIENCE:-5}" --early-stop-metric "${METRIC:-acc}" --keep-last "$AVERAGE")
    TAG="-plateau" BEAM=${BEAM:-4}
  fi
}

# read_until USAGE ARGS...: sets UNTIL from "--until STAGE" (the only option); else prints
# USAGE and exits with status 2.
read_until() {
  local usage=$1; shift
  UNTIL=""
  if [ $# -gt 0 ]; then
    { [ "$1" = --until ] && [ $# -eq 2 ]; } || { echo "$usage" >&2; exit 2; }
    UNTIL=$2
  fi
}

# stop_after STAGE: exit here when the recipe was run with --until STAGE ($UNTIL).
stop_after() { if [ "${UNTIL:-}" = "$1" ]; then echo "== stopped after $1"; exit 0; fi; }

# parse_trees PREPARE_DIR OUT_DIR SIDES PARSER_FLAGS...: `depnmt parse` unless done, in
# DATA_JOBS worker processes (`--jobs`, default 1; the WMT and ASPEC recipes default it to
# `auto`, one per core); with SHARDS=N as N parallel shards merged at the end — on a cluster,
# run each `depnmt parse --shard i/N` on its own node instead, then `depnmt parse --merge`.
parse_trees() {
  local prepare=$1 out=$2 sides=$3 i shards=${SHARDS:-1}
  shift 3
  done_stage "$out" && return 0
  fetch_stanza_models "$sides" "$@"
  if [ "$shards" -gt 1 ]; then
    local pids=()
    for ((i = 0; i < shards; i++)); do
      depnmt parse -i "$prepare" -o "$out" --side "$sides" "$@" --shard "$i/$shards" & pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i"; done
    depnmt parse -i "$prepare" -o "$out" --side "$sides" "$@" --merge
  else
    depnmt parse -i "$prepare" -o "$out" --side "$sides" "$@" --jobs "${DATA_JOBS:-1}"
  fi
}

# fetch_stanza_models SIDES PARSER_FLAGS...: when the flags select stanza (`depnmt parse`'s
# default backend), fetch its models for the languages of SIDES (src: $SRC_LANG, tgt: $TGT_LANG,
# both) into the folder parse reads (--stanza-dir when given) — `depnmt models download`, which
# keeps files already there, so a re-run works offline; `parse` itself never downloads.
fetch_stanza_models() {
  local sides=$1 prev="" a langs=() dir=()
  shift
  for a in "$@"; do
    if [ "$prev" = --backend ] && [ "$a" != stanza ]; then return 0; fi
    [ "$prev" = --stanza-dir ] && dir=(--stanza-dir "$a")
    prev=$a
  done
  [ "$sides" = tgt ] || langs+=("$SRC_LANG")
  [ "$sides" = src ] || langs+=("$TGT_LANG")
  depnmt models download "${langs[@]}" "${dir[@]}"
}

# scheme_of NAME: sets SCHEME to today's scheme name of system NAME (a 0.1.0 name: its new name,
# with one warning per name); empty for an unknown name.
scheme_of() {
  local name=$1 part marks=0 parts
  SCHEME=""
  if [ -n "${OLD_SYSTEMS[$name]:-}" ]; then
    if [[ "$WARNED_SYSTEMS" != *" $name "* ]]; then
      echo "warning: system $name is deprecated; use ${OLD_SYSTEMS[$name]} (the old spelling goes in 0.3.0)" >&2
      WARNED_SYSTEMS+="$name "
    fi
    SCHEME=${OLD_SYSTEMS[$name]}; return 0
  fi
  [ "$name" = multitask ] && { SCHEME=abs; return 0; }
  IFS=+ read -r -a parts <<< "$name"
  for part in "${parts[@]}"; do
    case $part in abs|noabs) marks=$((marks + 1)); continue ;; esac
    [[ " $SCHEME_PARTS " == *" $part "* || "$part" =~ ^gps-layer[1-9][0-9]*$ ]] || return 0
  done
  [ "$marks" != 1 ] || SCHEME=$name
}

# system_flags NAME: sets the array FLAGS to the `depnmt train` flags of system NAME: its scheme
# name (scheme_of), DBSA's layer $DBSA_LAYER (lisa's is 1) and, for a 0.1.0 name of DBSA, its
# 0.1.0 chain head.
system_flags() {
  scheme_of "$1"
  if [ -z "$SCHEME" ]; then
    echo "error: unknown system '$1' (known: $ALL_SYSTEMS $ABLATION_SYSTEMS $BASELINE_SYSTEMS; or abs/noabs and parts joined by '+': $SCHEME_PARTS gps-layerN)" >&2
    return 2
  fi
  FLAGS=(--scheme "$SCHEME")
  [[ "+$SCHEME+" != *"+dbsa-enc+"* ]] || FLAGS+=(--dbsa-enc-layer "$DBSA_LAYER")
  [[ "+$SCHEME+" != *"+dbsa-dec+"* ]] || FLAGS+=(--dbsa-dec-layer "$DBSA_LAYER")
  [[ " $OLD_DBSA " != *" $1 "* ]] || FLAGS+=(--dbsa-chain-head first)
}

# system_folder NAME OUT: the folder name of system NAME under OUT/models and OUT/hyps: NAME,
# or the 0.1.0 name of the same system when only that folder exists (a campaign begun by
# depnmt 0.1.0 is continued, not trained again; not for DBSA, whose default changed).
system_folder() {
  local name=$1 out=$2 old
  if [ ! -e "$out/models/$name" ]; then
    for old in "${!OLD_SYSTEMS[@]}"; do
      if [ "${OLD_SYSTEMS[$old]}" = "$name" ] && [[ " $OLD_DBSA " != *" $old "* ]] \
          && [ -e "$out/models/$old" ]; then
        echo "$old"; return 0
      fi
    done
  fi
  echo "$name"
}

# tree_sides SYSTEMS...: which sides need parse trees (src, tgt or both; empty if none).
tree_sides() {
  local src="" tgt="" s part parts
  for s in "$@"; do
    [ "$s" = multitask ] && { src=1; continue; }     # its data needs the source trees
    scheme_of "$s" 2>/dev/null
    IFS=+ read -r -a parts <<< "$SCHEME"
    for part in "${parts[@]}"; do
      case $part in
        abs|noabs|rel) ;;
        dbsa-dec) tgt=1 ;;
        *) src=1 ;;
      esac
    done
  done
  if [ -n "$src" ] && [ -n "$tgt" ]; then echo both; elif [ -n "$tgt" ]; then echo tgt
  elif [ -n "$src" ]; then echo src; fi
}

# multitask_data PREPARE_DIR TREES_DIR BPE_FLAGS...: the data of system "multitask" (Currey &
# Heafield 2019: translation mixed with parsing the source, task tags): `depnmt multitask` into
# $WORK/multitask, then `depnmt bpe BPE_FLAGS` into $WORK/multitask-bpe; each skipped when done.
multitask_data() {
  local prepare=$1 trees=$2
  shift 2
  done_stage "$WORK/multitask" || depnmt multitask -i "$prepare" -t "$trees" -o "$WORK/multitask"
  done_stage "$WORK/multitask-bpe" || depnmt bpe -i "$WORK/multitask" -o "$WORK/multitask-bpe" "$@"
}

# system_data NAME: the data folder system NAME trains on: $DATA (default $WORK/bpe), or
# $WORK/multitask-bpe for "multitask".
system_data() {
  if [ "$1" = multitask ]; then echo "$WORK/multitask-bpe"; else echo "${DATA:-$WORK/bpe}"; fi
}

# check_data DATA_FOLDERS...: with ARCHIVE set, the data folders (and $TREES, and the folders
# they were made from: prepare) must be the data the archived runs were trained on
# ($ARCHIVE/data.json, written by `depnmt archive`); a difference stops the campaign with one
# line naming the folder and its first differing file. Nothing to check without a data.json.
check_data() {
  [ -n "${ARCHIVE:-}" ] || return 0
  local folder checks=()
  for folder in "$@" ${TREES:+"$TREES"}; do checks+=(--check-data "$folder"); done
  depnmt archive "${checks[@]}" -o "$ARCHIVE"
}

# run_system NAME: train (or resume) with the shared budget and seed $SEED, average the last
# $AVERAGE kept checkpoints (when AVERAGE > 0), then translate the test source and keep the
# test references' likelihood under the same checkpoint (test_likelihood). System
# "multitask" trains on $WORK/multitask-bpe and translates the tagged $WORK/multitask test source.
# TRAIN_LAUNCH replaces `depnmt` for training, e.g. "torchrun --nproc_per_node 4 -m depnmt.cli".
# With ARCHIVE set, the data is checked against the archive's record first (check_data).
# A finished model is reused only when it was trained with the flags the recipe would train it
# with now (`depnmt train --check-settings`: another STEPS, EPOCHS, ARCH, LR, ... stops the
# recipe with one line naming the setting, exit 2), and its hypotheses only when they were
# made as they would be now (decoding_settings, recorded in HYP.settings).
run_system() {
  local name=$1 out=${OUT:-$WORK} folder
  folder=$(system_folder "$1" "$out")
  local model="$out/models/$folder" hyp="$out/hyps/$folder.$TGT_LANG" ckpt=()
  local data test_src=${TEST_SRC:-$WORK/prepare/test.raw.$SRC_LANG}
  data=$(system_data "$name")
  [ "$name" != multitask ] || test_src=$WORK/multitask/test.raw.$SRC_LANG
  system_flags "$name"
  mkdir -p "$out/models" "$out/hyps"
  local train=(train -i "$data" ${TREES:+-t "$TREES"} -o "$model" "${COMMON[@]}" "${FLAGS[@]}"
               --seed "$SEED")
  if done_stage "$model"; then
    depnmt "${train[@]}" --check-settings || exit 2      # trained with these settings
  else
    check_data "$data"
    local resume=()
    [ -f "$model/checkpoints/last.pt" ] && resume=(--resume)
    local launch
    read -r -a launch <<< "${TRAIN_LAUNCH:-depnmt}"
    echo "== $name (seed $SEED): train $(date -u +%H:%M:%S)"
    "${launch[@]}" "${train[@]}" "${resume[@]}"
  fi
  local kept=0 last=0                    # a run restored from `depnmt archive` has no checkpoints
  [ ! -d "$model/checkpoints" ] || kept=$(find "$model/checkpoints" -name 'step*.pt' | wc -l)
  if [ "${AVERAGE:-0}" -gt 0 ] && [ "$kept" -gt 0 ]; then     # (no snapshots: best.pt)
    ckpt=(--checkpoint average) last=$((kept < AVERAGE ? kept : AVERAGE))
  fi
  decoding_settings "$model" "$test_src" "$last"
  # (no record: made by an earlier recipe, reused as made; no checkpoints: restored from an
  # archive, whose averaged checkpoint is gone: every setting but the checkpoint is compared)
  if [ -s "$hyp" ] && [ -f "$hyp.settings" ]; then
    if [ -d "$model/checkpoints" ]; then
      same_settings "$hyp.settings" "$hyp" "$hyp and $hyp.* to translate again" "${DECODING[@]}"
    else
      same_settings "$hyp.settings" "$hyp" "$model and $hyp* to train and translate again (the \
run is restored from an archive, without checkpoints)" "${DECODING[0]}" "${DECODING[@]:2}"
    fi
  fi
  if [ ! -s "$hyp" ]; then
    [ "$last" -eq 0 ] || depnmt average -m "$model" --last "$last" -o average
    echo "== $name (seed $SEED): translate $(date -u +%H:%M:%S)"
    depnmt translate -m "$model" "${ckpt[@]}" --beam "$BEAM" --alpha "${ALPHA:-0.6}" \
      -i "$test_src" > "$hyp.tmp"
    rm -f "$hyp.ref-logprob"                         # the old checkpoint's
    record_settings "$hyp.settings" "${DECODING[@]}" "hypotheses=$(digest "$hyp.tmp")"
    mv "$hyp.tmp" "$hyp"
  fi
  if [ ! -s "$hyp.ref-logprob" ]; then
    if [ -d "$model/checkpoints" ]; then
      echo "== $name (seed $SEED): test likelihood $(date -u +%H:%M:%S)"
      test_likelihood "$model" "$test_src" "$hyp.ref-logprob" "${ckpt[@]}"
      [ ! -f "$hyp.settings" ] || [ ! -s "$hyp.ref-logprob" ] \
        || add_settings "$hyp.settings" "likelihood=$(digest "$hyp.ref-logprob")"
    else
      echo "== $name (seed $SEED): no test likelihood (restored from an archive without it," \
        "and without checkpoints to compute it)"
    fi
  fi
  [ -z "${ARCHIVE:-}" ] || depnmt archive "$out" -o "$ARCHIVE"
}

# decoding_settings MODEL TEST_SRC LAST: sets DECODING (array of KEY=VALUE) to what a run's
# hypotheses and test likelihood are made from: the finished training (model: the sha256 of
# MODEL/manifest.json), the checkpoint (best, or the average of the LAST newest kept), BEAM,
# ALPHA, and the test source and likelihood references (sha256). run_system records it in
# HYP.settings beside the hypotheses and compares it before it reuses them; it adds the sha256
# of the hypotheses it wrote and of their test likelihood (hypotheses=, likelihood=), which
# `depnmt report` checks the files against.
decoding_settings() {
  local model=$1 src=$2 last=$3 ref=${LIKELIHOOD_REF:-${TEST_REF:-$WORK/prepare/test.raw.$TGT_LANG}}
  local checkpoint=best alpha
  [ "$last" -eq 0 ] || checkpoint="average of the last $last"
  alpha=$(LC_ALL=C printf '%g' "${ALPHA:-0.6}")     # numbers as numbers: 0.60 is 0.6, 04 is 4
  DECODING=("model=$(digest "$model/manifest.json")" "checkpoint=$checkpoint" "beam=$((10#$BEAM))"
            "alpha=$alpha" "test source=$(digest "$src")"
            "likelihood references=$(digest "$ref")")
}

# digest FILE: the first 16 hex digits of FILE's sha256 ("none" when there is no FILE).
digest() { if [ -f "$1" ]; then sha256sum < "$1" | cut -c1-16; else echo none; fi; }

# test_likelihood MODEL TEST_SRC OUT CHECKPOINT_FLAGS...: the log-probability that MODEL (with
# the checkpoint that translated) gives each test reference, $LIKELIHOOD_REF (default
# $TEST_REF, else prepare's test.raw.$TGT_LANG), by `depnmt rescore`, written to OUT: the line
# "logprob TAB tokens TAB words", then one line per sentence: rescore's log-probability and
# subwords (with the end-of-sentence token), and the reference's whitespace-separated words.
# A failed rescore is a warning, not the campaign's end: the run is reported without it.
test_likelihood() {
  local model=$1 src=$2 out=$3 ref=${LIKELIHOOD_REF:-${TEST_REF:-$WORK/prepare/test.raw.$TGT_LANG}}
  shift 3
  if ! depnmt rescore -m "$model" "$@" --src "$src" --tgt "$ref" -o "$out.scores"; then
    rm -f "$out.scores"
    echo "warning: $out: not written (depnmt rescore failed, above): this run has no test" \
      "likelihood" >&2
    return 0
  fi
  { printf 'logprob\ttokens\twords\n'
    paste <(cut -f2,3 "$out.scores") <(awk '{ print NF }' "$ref"); } > "$out.tmp"
  mv "$out.tmp" "$out"
  rm -f "$out.scores"
}

# run_campaign BASE SYSTEMS...: every system once per seed of $SEEDS into $(seeded BASE SEED),
# seed by seed (run_system), after checking the systems' data against $ARCHIVE's record when
# ARCHIVE is set (check_data); then report_systems BASE SYSTEMS... writes the table. With JOBS=N
# > 1, N workers take the (seed, system) runs in that order, each the next one not yet taken
# when it is free (runs that stop early leave no worker idle); each worker's output lines are
# prefixed "[job K]" (by filters that outlive Ctrl-C, so that each training's last words — stopped
# after update N, how to continue — still show), and the campaign fails after all workers have
# stopped when any failed.
run_campaign() {
  local base=$1 jobs=${JOBS:-1} s data
  shift
  mapfile -t data < <(for s in "$@"; do system_data "$s"; done | sort -u)
  check_data "${data[@]}"
  if [ "$jobs" -le 1 ]; then campaign_worker "" "$base" "$@"; return; fi
  local cores threads k queue pids=() failed=()
  cores=$(nproc)
  threads=${OMP_NUM_THREADS:-$(( cores / jobs > 0 ? cores / jobs : 1 ))}
  queue=$(mktemp -d)
  echo 0 > "$queue/next"
  echo "== $jobs jobs at once, $threads thread(s) each ($cores cores)"
  for ((k = 0; k < jobs; k++)); do
    (OMP_NUM_THREADS=$threads campaign_worker "$queue" "$base" "$@") \
      > >(trap '' INT TERM; exec sed -u "s/^/[job $((k + 1))] /") \
      2> >(trap '' INT TERM; exec sed -u "s/^/[job $((k + 1))] /" >&2) &
    pids+=($!)
  done
  for k in "${!pids[@]}"; do wait "${pids[$k]}" || failed+=($((k + 1))); done
  rm -rf "$queue"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "run_campaign: job(s) ${failed[*]} failed (their output above is prefixed [job N])" >&2
    return 1
  fi
}

# campaign_worker QUEUE BASE SYSTEMS...: run_system for every (seed, system) run in order, or
# with a QUEUE folder (shared by the workers) only the runs it takes from it (take_run).
campaign_worker() {
  local queue=$1 base=$2 i=0 mine=-1 seed s
  shift 2
  export OMP_NUM_THREADS
  [ -z "$queue" ] || mine=$(take_run "$queue")
  for seed in $SEEDS; do
    for s in "$@"; do
      if [ -z "$queue" ] || [ "$i" -eq "$mine" ]; then
        SEED=$seed OUT=$(seeded "$base" "$seed")
        run_system "$s"
        [ -z "$queue" ] || mine=$(take_run "$queue")
      fi
      i=$((i + 1))
    done
  done
}

# take_run QUEUE: the number of the next run nobody has taken (QUEUE/next, under a mkdir lock).
take_run() {
  local n
  until mkdir "$1/lock" 2>/dev/null; do sleep 0.1; done
  n=$(cat "$1/next")
  echo $((n + 1)) > "$1/next"
  rmdir "$1/lock"
  echo "$n"
}

# report_systems BASE SYSTEMS...: the results table against abs and abs+rel (when run; BASELINES
# names others), every seed of $SEEDS a run of each system, as
# $(seeded BASE SEED)/results.{md,json,png} for one seed and BASE-seeds-1-2-3/results.* for several (mean ± sd over seeds, intervals, p-values), and the
# dev loss/BLEU curves of every run as curves.png beside it.
report_systems() {
  local base=$1 args=() baselines=() curves=() s seed out folder
  shift
  for seed in $SEEDS; do
    out=$(seeded "$base" "$seed")
    for s in "$@"; do
      folder=$(system_folder "$s" "$out")
      args+=(-s "$s" "$out/models/$folder" "$out/hyps/$folder.$TGT_LANG")
      curves+=(-m "$out/models/$folder" --label "$s (seed $seed)")
    done
  done
  for s in ${BASELINES:-abs abs+rel rel}; do      # (rel: the 0.1.0 name of abs+rel)
    [[ " $* " == *" $s "* ]] && baselines+=(-b "$s")
  done
  if [ "$(echo $SEEDS | wc -w)" -gt 1 ]; then out="$base-seeds-$(echo $SEEDS | tr ' ' -)"
  else out=$(seeded "$base" "$SEEDS"); fi
  mkdir -p "$out"
  depnmt report --ref "${TEST_REF:-$WORK/prepare/test.raw.$TGT_LANG}" --lang "$TGT_LANG" \
    "${baselines[@]}" -o "$out/results" "${args[@]}"
  depnmt plot -o "$out/curves.png" "${curves[@]}"             # dev loss/BLEU of every run
}
