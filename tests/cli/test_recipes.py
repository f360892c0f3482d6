"""Recipes: the ASPEC recipe without ASPEC (names what is missing), its preparation stages on a
tiny fake ASPEC-format folder, and the shared system table of the comparison recipes."""

from __future__ import annotations

import json
import os
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


def test_compare_recipes_know_every_system():
    script = f"""
        . {REPO}/recipes/lib/compare.sh
        DBSA_LAYER=2
        for s in $ALL_SYSTEMS; do system_flags "$s"; echo "$s: ${{FLAGS[*]}}"; done
        echo "sides: $(tree_sides abs rel) / $(tree_sides abs gps) / $(tree_sides dbsa-dec) / $(tree_sides dep dbsa-dec)"
        echo "seeded: $(seeded out/compare) / $(SEED=3 seeded out/compare)"
        system_flags nonsense
    """
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "unknown system 'nonsense'" in result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert lines["dbsa-enc+dec"] == ("--scheme Transformer_abs+DBSA(Enc)+DBSA(Dec) "
                                     "--dbsa-enc-layer 2 --dbsa-dec-layer 2")
    assert lines["gps-all"] == "--scheme Transformer_gps --gps-layers all"
    assert lines["sides"] == " / src / tgt / both"
    assert lines["seeded"] == "out/compare / out/compare-seed3"    # other seeds side by side
    from depnmt.model.schemes.registry import resolve
    for name, flags in lines.items():                   # every preset exists
        if name not in ("sides", "seeded"):
            resolve(flags.split()[1])


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
