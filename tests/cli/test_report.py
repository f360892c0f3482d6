"""``depnmt report``: the results table of trained systems (training logs + sacreBLEU +
paired bootstrap against several baselines), and its errors."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest

from .conftest import copy_run, run_cli


def write_hyps(tiny_bpe, tmp_path):
    """The reference itself (a perfect system), and the reference with shuffled words."""
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    lines = ref.read_text(encoding="utf-8").splitlines()
    rng = random.Random(0)
    shuffled = []
    for line in lines:
        words = line.split()
        rng.shuffle(words)
        shuffled.append(" ".join(words))
    good, bad = tmp_path / "good.de", tmp_path / "bad.de"
    good.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bad.write_text("\n".join(shuffled) + "\n", encoding="utf-8")
    return ref, good, bad


def rows(table: list[str], first: int) -> list[list[str]]:
    """The cells of a Markdown table starting at line ``first`` (header), until a blank line."""
    out = []
    for line in table[first:]:
        if not line.startswith("|"):
            break
        out.append([c.strip() for c in line.strip("|").split("|")])
    return out


def test_report_table_json_and_plot(tiny_model, tiny_bpe, tmp_path, capsys):
    ref, good, bad = write_hyps(tiny_bpe, tmp_path)
    out = tmp_path / "res" / "results"
    assert run_cli(["report", "--ref", ref, "-b", "bad", "-b", "good", "-o", out, "--bootstrap",
                    "200", "--shuffles", "200", "-s", "bad", tiny_model, bad,
                    "-s", "good", tiny_model, good]) == 0
    table = capsys.readouterr().out.splitlines()
    systems = rows(table, 0)
    assert systems[0][:3] == ["system", "scheme", "runs"] and systems[0][11:13] == ["BLEU", "chrF"]
    good_row = systems[3]
    assert good_row[:3] == ["good", "abs", "1"] and good_row[11] == "100.00"   # no sd of one run
    assert good_row[13] == "100.00"                                            # every run's BLEU
    pairs = rows(table, table.index("") + 3)
    assert pairs[0][:3] == ["system", "vs", "Δ BLEU [95 % CI]"]
    assert [r[:2] for r in pairs[2:]] == [["bad", "good"], ["good", "bad"]]
    assert float(pairs[3][2]) > 50 and "[" not in pairs[3][2]                  # one run: no CI
    assert float(pairs[3][3]) < 0.05 and float(pairs[3][4]) < 0.05            # AR and bootstrap
    records = json.loads(out.with_suffix(".json").read_text())
    metrics = [json.loads(line) for line in (tiny_model / "metrics.jsonl").read_text().splitlines()]
    run = records[1]["runs"][0]
    assert run["updates"] == 12 and records[1]["parameters"] == metrics[0]["parameters"]
    selected = [m for m in metrics if m.get("best")][-1]
    assert (run["selected_step"], run["selected_dev_nll"]) == (selected["step"], selected["dev_nll"])
    loads = [m["load"] for m in metrics if m["event"] == "train"]       # train logs the load
    assert loads and run["load"] == pytest.approx(sum(loads) / len(loads))
    assert systems[0][8] == "load" and good_row[8] == f"{records[1]['load_mean']:.1f}"
    assert records[0]["tok_s_ratio"] == 1.0 and records[1]["vs"]["bad"]["chrf"]["p_ar"] < 0.05
    assert out.with_suffix(".md").read_text() == "\n".join(table) + "\n"
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    # what the p-values need to be made again, in the table and the JSON
    assert ("p-values: 200 shuffles, 200 bootstrap resamples, seed 12345 (`--shuffles`, "
            "`--bootstrap`, `--seed`: the same give the same p-values).") in table
    assert records[0]["tests"] == {"shuffles": 200, "bootstrap": 200, "seed": 12345}


def noisy_copies(ref: Path, tmp_path: Path, name: str, drop: float, seeds: range) -> list[Path]:
    """One hypothesis file per seed: the reference with each word dropped with prob. ``drop``."""
    lines = ref.read_text(encoding="utf-8").splitlines()
    files = []
    for seed in seeds:
        rng = random.Random(seed)
        path = tmp_path / f"{name}{seed}.de"
        path.write_text("".join(" ".join(w for w in line.split() if rng.random() >= drop) + "\n"
                                for line in lines), encoding="utf-8")
        files.append(path)
    return files


def test_report_groups_runs_of_a_system(tiny_model, tiny_bpe, tmp_path, capsys):
    """Three runs per system, repeated -s NAME: mean ± sd over runs, each run's BLEU, a Welch
    interval and p-values; AR needs the same number of runs on both sides."""
    import sacrebleu
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    worse = noisy_copies(ref, tmp_path, "worse", 0.5, range(3))
    better = noisy_copies(ref, tmp_path, "better", 0.1, range(10, 13))
    args = ["report", "--ref", ref, "-b", "worse", "--shuffles", "99", "--bootstrap", "99",
            "-o", tmp_path / "r"]
    for name, files in (("worse", worse), ("better", better)):
        for f in files:
            args += ["-s", name, tiny_model, f]
    args = own_models(args)
    assert run_cli(args) == 0
    capsys.readouterr()
    records = {r["system"]: r for r in json.loads((tmp_path / "r.json").read_text())}
    refs = ref.read_text(encoding="utf-8").splitlines()
    scores = [sacrebleu.corpus_bleu(f.read_text(encoding="utf-8").splitlines(), [refs]).score
              for f in better]
    mean = sum(scores) / 3
    sd = (sum((s - mean) ** 2 for s in scores) / 2) ** 0.5
    r = records["better"]
    assert r["n_runs"] == 3 and [run["bleu"] for run in r["runs"]] == pytest.approx(scores)
    assert (r["bleu_mean"], r["bleu_sd"]) == (pytest.approx(mean), pytest.approx(sd))
    vs = r["vs"]["worse"]["bleu"]
    assert vs["difference"] == pytest.approx(mean - records["worse"]["bleu_mean"])
    assert vs["low"] < vs["difference"] < vs["high"] and vs["low"] > 0
    assert vs["p_ar"] == pytest.approx(1 / 100) and vs["p_bootstrap"] == pytest.approx(1 / 100)
    table = (tmp_path / "r.md").read_text()
    assert f"{mean:.2f} ± {sd:.2f}" in table and ", ".join(f"{s:.2f}" for s in scores) in table
    # one run fewer on one side: no approximate randomization (a warning), the rest as before
    fewer = [a if a != tmp_path / "r" else tmp_path / "r2" for a in args[:-4]]
    assert run_cli(fewer) == 0
    assert "no approximate randomization" in capsys.readouterr().err
    vs = json.loads((tmp_path / "r2.json").read_text())[1]["vs"]["worse"]["bleu"]
    assert vs["p_ar"] is None and vs["p_bootstrap"] is not None


@pytest.mark.slow
def test_report_reads_recipe_folders(tiny_model, tiny_bpe, tmp_path, capsys):
    """-f FOLDER (models/NAME, hyps/NAME.LANG), one folder per seed; unfinished runs skipped."""
    ref, good, bad = write_hyps(tiny_bpe, tmp_path)
    for seed, (hyp_abs, hyp_rel) in enumerate([(bad, good), (good, bad)], 1):
        folder = tmp_path / f"compare-seed{seed}"
        (folder / "models").mkdir(parents=True)
        (folder / "hyps").mkdir()
        for k, (name, hyp) in enumerate((("abs", hyp_abs), ("rel", hyp_rel))):
            (folder / "models" / name).symlink_to(model_copy(tiny_model, 2 * seed + k),
                                                  target_is_directory=True)
            (folder / "hyps" / f"{name}.de").write_text(hyp.read_text(encoding="utf-8"))
    (tmp_path / "compare-seed2" / "models" / "dep").mkdir()       # not trained yet
    (tmp_path / "compare-seed2" / "models" / "dep" / "config.json").write_text(
        (tiny_model / "config.json").read_text())
    assert run_cli(["report", "--ref", ref, "--shuffles", "50", "--bootstrap", "50",
                    "-f", tmp_path / "compare-seed1", "-f", tmp_path / "compare-seed2"]) == 0
    out, err = capsys.readouterr()
    assert "models/dep: skipped" in err
    systems = rows(out.splitlines(), 0)
    assert [r[:3] for r in systems[2:]] == [["abs", "abs", "2"], ["rel", "abs", "2"]]
    assert systems[2][11] == systems[3][11] and " ± " in systems[2][11]    # runs {bad, good}


def test_report_errors_are_one_line(tiny_model, tiny_bpe, tmp_path, capsys):
    ref, good, bad = write_hyps(tiny_bpe, tmp_path)
    short = tmp_path / "short.de"
    short.write_text("ein Hund\n", encoding="utf-8")
    cases = [
        (["-b", "rel", "-s", "abs", tiny_model, good], "baseline 'rel' is not one of the systems"),
        (own_models(["-s", "abs", tiny_model, good, "-s", "abs", tiny_model, good]),
         "same hypothesis file twice"),
        (["-s", "abs", tiny_model, short], "short.de has 1 lines"),
        (["-s", "abs", tmp_path, good], "no config.json"),
        ([], "no systems"),
        (["-f", tmp_path], "no models/ folder"),
    ]
    for args, message in cases:
        assert run_cli(["report", "--ref", ref, *args]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_report_refuses_one_run_counted_twice(tiny_model, tiny_bpe, tmp_path, capsys):
    """Two runs of a system whose hypotheses are one file (under two paths: a link, `..`) or
    the same bytes (a copy) are refused with one error naming both paths, before any score:
    counted twice, one run would look like two that agree (sd 0.00)."""
    import os
    import shutil
    ref, good, bad = write_hyps(tiny_bpe, tmp_path)
    link, copy = tmp_path / "link.de", tmp_path / "copy.de"
    os.symlink(bad, link)
    shutil.copy(bad, copy)
    (tmp_path / "sub").mkdir()
    dotted = tmp_path / "sub" / ".." / "bad.de"
    for other, message in ((link, "lists the same hypothesis file twice"),
                           (dotted, "lists the same hypothesis file twice"),
                           (copy, "hold the same hypotheses byte for byte")):
        assert run_cli(["report", "--ref", ref, "--bootstrap", "0", "--shuffles", "0",
                        *own_models(["-s", "x", tiny_model, good, "-s", "x", tiny_model, bad,
                                     "-s", "x", tiny_model, other])]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: system 'x'")
        assert message in err and f"{bad}" in err and f"{other}" in err
    # two systems may well give the same output: only the runs of one system are compared
    assert run_cli(["report", "--ref", ref, "--bootstrap", "0", "--shuffles", "0",
                    "-s", "x", tiny_model, bad, "-s", "y", tiny_model, copy]) == 0


def test_report_refuses_one_training_counted_as_two_runs(tiny_model, tiny_bpe, tmp_path,
                                                         capsys):
    """Two runs of a system from one model folder (given twice, or through a link: e.g. two
    decodings of one model) are refused with one error naming the folder and both hypothesis
    files: one training would count as two, its decoding difference as run-to-run noise."""
    ref, good, bad = write_hyps(tiny_bpe, tmp_path)
    link = tmp_path / "link"
    link.symlink_to(tiny_model, target_is_directory=True)
    for other in (tiny_model, link):
        assert run_cli(["report", "--ref", ref, "--bootstrap", "0", "--shuffles", "0",
                        "-s", "x", tiny_model, good, "-s", "x", other, bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: system 'x' lists model folder")
        assert f"{good}" in err and f"{bad}" in err
    # one model in two systems (two ways of decoding it compared) is fine
    assert run_cli(["report", "--ref", ref, "--bootstrap", "0", "--shuffles", "0",
                    "-s", "x", tiny_model, good, "-s", "y", tiny_model, bad]) == 0


def test_report_refuses_a_copied_run_in_results_folders(tiny_model, tiny_bpe, tmp_path, capsys):
    """-f: a results folder copied under another name is the same runs again: refused."""
    ref, _, bad = write_hyps(tiny_bpe, tmp_path)
    folders = [tmp_path / "compare", tmp_path / "compare-copy"]
    for k, folder in enumerate(folders):
        (folder / "models").mkdir(parents=True)
        (folder / "hyps").mkdir()
        (folder / "models" / "abs").symlink_to(model_copy(tiny_model, k),
                                               target_is_directory=True)
        (folder / "hyps" / "abs.de").write_text(bad.read_text(encoding="utf-8"))
    assert run_cli(["report", "--ref", ref, "--shuffles", "0", "--bootstrap", "0",
                    "-f", folders[0], "-f", folders[1]]) == 2
    err = capsys.readouterr().err
    assert f"{folders[0]}/hyps/abs.de and {folders[1]}/hyps/abs.de hold the same" in err


def test_report_adjusts_for_several_systems_and_states_the_noise(tiny_model, tiny_bpe, tmp_path,
                                                                  capsys):
    """Two systems against one baseline form a family: their AR p-values are Holm-adjusted; the
    notes give the run-to-run sd pooled over the systems and the difference it can resolve."""
    import sacrebleu

    from depnmt.evaluation import significance as sig
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    systems = {"base": noisy_copies(ref, tmp_path, "base", 0.4, range(2)),
               "same": noisy_copies(ref, tmp_path, "same", 0.4, range(20, 22)),
               "better": noisy_copies(ref, tmp_path, "better", 0.1, range(10, 12))}
    args = ["report", "--ref", ref, "-b", "base", "--shuffles", "99", "--bootstrap", "99",
            "-o", tmp_path / "r"]
    for name, files in systems.items():
        for f in files:
            args += ["-s", name, tiny_model, f]
    args = own_models(args)
    assert run_cli(args) == 0
    capsys.readouterr()
    records = {r["system"]: r for r in json.loads((tmp_path / "r.json").read_text())}
    p = [records[s]["vs"]["base"]["bleu"]["p_ar"] for s in ("same", "better")]
    holm = [records[s]["vs"]["base"]["bleu"]["p_ar_holm"] for s in ("same", "better")]
    assert holm == pytest.approx(sig.holm(p)) and holm[1] == pytest.approx(2 * p[1])
    refs = ref.read_text(encoding="utf-8").splitlines()
    scores = [[sacrebleu.corpus_bleu(f.read_text(encoding="utf-8").splitlines(), [refs]).score
               for f in files] for files in systems.values()]
    sd = math.sqrt(sum((a - b) ** 2 / 2 for a, b in scores) / 3)     # pairs: (a−b)²/2 each
    table = (tmp_path / "r.md").read_text()
    lines = table.splitlines()
    comparisons = rows(lines, next(i for i, line in enumerate(lines) if "Holm |" in line))
    assert comparisons[0][3:6] == ["p AR", "Holm", "p boot"]
    assert f"sd {sd:.2f} BLEU (df 3)" in table
    assert f"±{sig.resolvable_difference(sd, 2):.2f} BLEU" in table


def keep_tokenizer_model(tiny_model, folder):
    """A copy of the tiny model whose target side was prepared from tokenized text (the keep
    tokenizer, Moses detokenization), as for small_parallel_enja."""
    import shutil
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["tokenizers"]["tgt"] = {"kind": "keep", "lang": "de", "lowercase": False,
                                   "unicode": "NFC", "detok": "moses"}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_report_makes_references_from_a_tokenized_file(tiny_model, tiny_bpe, tmp_path, capsys):
    """--ref-from-tokens: a corpus's tokenized test file becomes the references prepare wrote
    (the runs' target tokenizer); without it the outputs are scored against the tokens (BLEU
    without its own tokenization, which would hide the difference for most lines)."""
    from depnmt.stages.tokenize import make_tokenizer
    moses = make_tokenizer({"kind": "moses", "lang": "de"})
    raw = (tiny_bpe.parent / "prepare" / "test.raw.de").read_text(encoding="utf-8").splitlines()
    lines = [line for line in raw if moses.detokenize(moses.tokenize(line)) == line
             and moses.tokenize(line) != line.split()][:20]
    assert len(lines) >= 5                    # lines whose tokens differ from their words
    tokenized, hyp = tmp_path / "test.tok.de", tmp_path / "hyp.de"
    tokenized.write_text("".join(" ".join(moses.tokenize(x)) + "\n" for x in lines), "utf-8")
    hyp.write_text("".join(x + "\n" for x in lines), "utf-8")
    model = keep_tokenizer_model(tiny_model, tmp_path / "keep-model")
    bleu = {}
    for flags in ([], ["--ref-from-tokens"]):
        assert run_cli(["report", "-r", tokenized, *flags, "--tokenize", "none", "--bootstrap",
                        "0", "--shuffles", "0", "-s", "abs", model, hyp]) == 0
        bleu[bool(flags)] = float(rows(capsys.readouterr().out.splitlines(), 0)[2][11])
    assert bleu[True] == 100.0 and bleu[False] < 90.0
    other = tmp_path / "hyp2.de"
    other.write_text(hyp.read_text(encoding="utf-8"), encoding="utf-8")
    assert run_cli(["report", "-r", tokenized, "--ref-from-tokens", "-s", "abs", model, hyp,
                    "-s", "abs", tiny_model, other]) == 2
    err = capsys.readouterr().err
    assert "tokenize their targets differently" in err and "Traceback" not in err


def test_report_gives_the_dev_uas_of_dbsa_systems(tiny_model, tiny_bpe, tmp_path, capsys):
    """Systems whose runs logged DBSA's dev UAS get a table of it (the last validation's: mean ±
    sd and each run's); the others are not in it, and without such systems there is none."""
    import shutil
    ref, _, bad = write_hyps(tiny_bpe, tmp_path)
    runs = []
    for i, (enc, dec, visible) in enumerate([(80.0, 50.0, 90.0), (84.0, 54.0, 94.0)]):
        model = tmp_path / f"dbsa{i}"
        copy_run(tiny_model, model)
        with (model / "metrics.jsonl").open("a", encoding="utf-8") as f:
            for scale in (0.5, 1.0):                  # an earlier validation, then the last
                f.write(json.dumps({"time": 1.0, "event": "valid", "step": 12, "epoch": 1,
                                    "dev_nll": 1.0, "dev_uas_enc": enc * scale,
                                    "dev_uas_dec": dec * scale,
                                    "dev_uas_dec_visible": visible * scale}) + "\n")
        runs.append(model)
    plain = noisy_copies(ref, tmp_path, "plain", 0.5, range(2))
    args = ["report", "--ref", ref, "-b", "plain", "--shuffles", "0", "--bootstrap", "0",
            *own_models(["-s", "plain", tiny_model, plain[0], "-s", "plain", tiny_model,
                         plain[1]])]
    hyps = noisy_copies(ref, tmp_path, "dbsa", 0.1, range(2))
    args += ["-s", "dbsa", runs[0], hyps[0], "-s", "dbsa", runs[1], hyps[1]]
    assert run_cli([*args, "-o", tmp_path / "r"]) == 0
    table = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(table) if "dev UAS enc" in line)
    assert rows(table, first) == [
        ["system", "runs", "dev UAS enc", "dev UAS dec", "dev UAS dec (visible heads)"],
        ["---", "---", "---:", "---:", "---:"],
        ["dbsa", "2", "82.00 ± 2.83 (80.00, 84.00)", "52.00 ± 2.83 (50.00, 54.00)",
         "92.00 ± 2.83 (90.00, 94.00)"]]
    assert table[first + 4].startswith("Dev UAS: the argmax heads of DBSA's parse heads")
    records = {r["system"]: r for r in json.loads((tmp_path / "r.json").read_text())}
    assert records["dbsa"]["dev_uas_dec_visible_mean"] == pytest.approx(92.0)
    assert "dev_uas_enc_mean" not in records["plain"]
    assert run_cli(["report", "--ref", ref, "--shuffles", "0", "--bootstrap", "0", "-o",
                    tmp_path / "r2", "-s", "plain", tiny_model, bad]) == 0
    assert "dev UAS" not in capsys.readouterr().out


def write_likelihood(hyp: Path, words: list[int], nll: float, seed: int, extra_tokens: int = 2,
                     noise: float = 0.15) -> list[tuple[float, int, int]]:
    """``HYP.ref-logprob`` beside ``hyp`` (as the recipes write it): per sentence a
    log-probability of about ``nll`` nats a word (Gaussian noise of ``noise`` per word,
    seeded), ``words[i] + extra_tokens`` tokens and ``words[i]`` words; returns the rows as
    written (``logprob`` rounded as rescore prints it)."""
    rng = random.Random(seed)
    rows = [(round(-w * max(0.1, nll + rng.gauss(0, noise)), 6), w + extra_tokens, w)
            for w in words]
    hyp.with_name(hyp.name + ".ref-logprob").write_text(
        "logprob\ttokens\twords\n" + "".join(f"{lp:.6f}\t{t}\t{w}\n" for lp, t, w in rows),
        encoding="utf-8")
    return rows


def nll_of(rows: list[tuple[float, int, int]], unit: int = 2) -> float:
    """−Σ logprob / Σ words (``unit`` 2) or / Σ tokens (1) of :func:`write_likelihood`'s rows."""
    return -sum(r[0] for r in rows) / sum(r[unit] for r in rows)


def likelihood_campaign(tiny_bpe, tmp_path, nll: dict[str, float | None], **extra_tokens):
    """Three runs of each system of ``nll`` (name -> NLL a word; None: no likelihood file), each
    with its own hypotheses; returns the report's arguments (baseline: the first) and the
    likelihood rows written, by system."""
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    words = [len(line.split()) for line in ref.read_text(encoding="utf-8").splitlines()]
    args = ["--ref", ref, "-b", next(iter(nll)), "--shuffles", "99", "--bootstrap", "99"]
    written: dict[str, list] = {}
    for k, (name, value) in enumerate(nll.items()):
        for seed in range(10 * k, 10 * k + 3):
            hyp, = noisy_copies(ref, tmp_path, name, 0.3, range(seed, seed + 1))
            if value is not None:
                written.setdefault(name, []).append(write_likelihood(
                    hyp, words, value, seed, extra_tokens.get(name, 2)))
            args += ["-s", name, hyp]
    return args, written


def with_model(args: list, model) -> list:
    """``args`` with a model folder of its own, a copy of ``model``, put after each ``-s NAME``
    (each run is a training of its own: ``report`` refuses one model folder for two runs)."""
    out, k = [], 0
    for i, a in enumerate(args):
        out.append(a)
        if i > 0 and args[i - 1] == "-s":
            out.append(model_copy(model, k))
            k += 1
    return out


def own_models(args: list) -> list:
    """``args`` (``-s NAME MODEL HYP`` triples among them) with each MODEL replaced by a copy
    of its own (:func:`model_copy`)."""
    out, k = list(args), 0
    for i, a in enumerate(args[:-2]):
        if a == "-s":
            out[i + 2] = model_copy(args[i + 2], k)
            k += 1
    return out


def model_copy(model: Path, k: int) -> Path:
    """The ``k``-th copy of the model folder ``model``, beside it (made once)."""
    copy = Path(model).parent / f"{Path(model).name}-run{k}"
    if not copy.exists():
        copy_run(model, copy)
    return copy


def test_report_compares_the_test_likelihood(tiny_model, tiny_bpe, tmp_path, capsys):
    """Runs with HYP.ref-logprob beside their hypotheses are compared on the test NLL per word
    (and per subword where the tokens are the same): a known difference of 0.2 nats a word is
    found (Welch's interval below 0, AR at its floor, answer yes), a system of the same NLL is
    not; a system with another segmentation has no per-subword comparison."""
    from depnmt.evaluation import significance as sig
    args, written = likelihood_campaign(tiny_bpe, tmp_path, {"base": 2.0, "same": 2.0,
                                                             "better": 1.8, "othersub": 2.0},
                                        othersub=5)
    assert run_cli(["report", *with_model(args, tiny_model), "-o", tmp_path / "r"]) == 0
    out = capsys.readouterr().out
    records = {r["system"]: r for r in json.loads((tmp_path / "r.json").read_text())}
    for name, runs in written.items():
        per_word = [nll_of(rows) for rows in runs]
        assert [run["nll"] for run in records[name]["runs"]] == pytest.approx(per_word)
        assert [run["nll_subword"] for run in records[name]["runs"]] == pytest.approx(
            [nll_of(rows, 1) for rows in runs])
        mean, sd = sig.mean_sd(per_word)
        assert (records[name]["nll_mean"], records[name]["nll_sd"]) == (pytest.approx(mean),
                                                                        pytest.approx(sd))
    better, same = records["better"]["vs"]["base"]["nll"], records["same"]["vs"]["base"]["nll"]
    assert better["difference"] == pytest.approx(records["better"]["nll_mean"]
                                                 - records["base"]["nll_mean"])
    assert better["difference"] < -0.1 and better["high"] < 0
    assert better["p_ar"] == pytest.approx(1 / 100) and better["p_ar_holm"] < 0.05
    assert same["p_ar"] > 0.05 and same["low"] < 0 < same["high"]
    assert better["subword"]["difference"] < 0
    assert records["othersub"]["vs"]["base"]["nll"]["subword"] is None
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "Δ NLL/word [95 % CI]" in line)
    table = {(r[0], r[1]): r for r in rows(lines, start)[2:]}
    assert table["better", "base"][7] == "**yes**"
    assert table["same", "base"][7].startswith("**not shown** (only differences beyond ±")
    assert table["othersub", "base"][6] == "segmentations differ"
    systems = rows(lines, next(i for i, line in enumerate(lines) if "test NLL/word |" in line))
    assert systems[2][:3] == ["base", "3", f"{records['base']['nll_mean']:.4f} ± "
                                           f"{records['base']['nll_sd']:.4f}"]
    power = rows(lines, next(i for i, line in enumerate(lines) if line.startswith("| measure")))
    assert [r[0] for r in power[2:]] == ["BLEU", "chrF", "test NLL/word"]
    sd, df = sig.pooled_sd([[run["nll"] for run in r["runs"]] for r in records.values()])
    assert power[4][1:5] == [f"{sd:.4f}", str(df), "4",
                             f"±{sig.resolvable_difference(sd, 3):.4f}"]


def test_runs_without_a_test_likelihood_are_shown_as_such(tiny_model, tiny_bpe, tmp_path,
                                                          capsys):
    """A system without HYP.ref-logprob (or with it for only some runs) is in the likelihood
    table as "no test likelihood archived", and so are its comparisons; its BLEU comparison is
    that of a report without any likelihood file. With no likelihood at all, the report has
    no likelihood table."""
    args, written = likelihood_campaign(tiny_bpe, tmp_path, {"base": 2.0, "none": None,
                                                             "partial": 1.9})
    args = with_model(args, tiny_model)
    partial = [a for a in args if str(a).startswith(str(tmp_path / "partial"))]
    Path(str(partial[0]) + ".ref-logprob").unlink()
    assert run_cli(["report", *args, "-o", tmp_path / "r"]) == 0
    lines = capsys.readouterr().out.splitlines()
    systems = rows(lines, next(i for i, line in enumerate(lines) if "test NLL/word |" in line))
    cells = {r[0]: r[2] for r in systems[2:]}
    assert cells["none"] == "no test likelihood archived"
    assert cells["partial"] == "no test likelihood archived for 1 of 3 runs"
    start = next(i for i, line in enumerate(lines) if "Δ NLL/word [95 % CI]" in line)
    table = {r[0]: r[2] for r in rows(lines, start)[2:]}
    assert table == {"none": "no test likelihood archived (none)",
                     "partial": "no test likelihood archived (partial)"}
    records = json.loads((tmp_path / "r.json").read_text())
    assert records[1]["vs"]["base"]["nll"] is None and records[1]["runs"][0]["nll"] is None
    for path in tmp_path.glob("*.ref-logprob"):
        path.unlink()
    assert run_cli(["report", *args, "-o", tmp_path / "plain"]) == 0
    out = capsys.readouterr().out
    assert "test NLL" not in out and "likelihood" not in out and "| measure" not in out
    plain = json.loads((tmp_path / "plain.json").read_text())
    for a, b in zip(records, plain):
        assert a["vs"].get("base", {}).get("bleu") == b["vs"].get("base", {}).get("bleu")


def test_report_refuses_a_likelihood_of_other_references(tiny_model, tiny_bpe, tmp_path,
                                                         capsys):
    """A likelihood file that is not one (header, fields, values), of another length, or whose
    word counts differ from another run's, is one error line naming the file (and line)."""
    args, written = likelihood_campaign(tiny_bpe, tmp_path, {"base": 2.0, "other": 1.9})
    args = with_model(args, tiny_model)
    target = tmp_path / "other10.de.ref-logprob"
    good = target.read_text(encoding="utf-8")
    lines = good.splitlines(keepends=True)
    first = lines[1].split("\t")
    cases = [("".join(lines[1:]), f"{target}:1: not a test likelihood file"),
             ("".join(lines[:-1]), f"{target}: 29 sentences, but the references have 30"),
             ("".join(lines[:2] + ["-1.0\t3\n"] + lines[3:]), f"{target}:3: expected logprob"),
             ("".join(lines[:2] + ["1.5\t3\t2\n"] + lines[3:]), f"{target}:3: log-probability"),
             ("".join(lines[:1] + [f"{first[0]}\t{first[1]}\t{int(first[2]) + 1}\n"]
                      + lines[2:]), f"{target}:2: {int(first[2]) + 1} reference words, but ")]
    for text, message in cases:
        target.write_text(text, encoding="utf-8")
        assert run_cli(["report", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


def test_report_plans_the_runs_a_difference_needs(tiny_model, tiny_bpe, tmp_path, capsys):
    """--delta MEASURE=VALUE: the power table gives the runs a side each difference needs at
    power 0.8 from the pooled sd (significance.runs_to_resolve); a bad --delta is a usage
    error."""
    from depnmt.evaluation import significance as sig
    args, _ = likelihood_campaign(tiny_bpe, tmp_path, {"base": 2.0, "same": 2.0})
    args = with_model(args, tiny_model)
    assert run_cli(["report", *args, "--delta", "bleu=0.5", "--delta", "NLL=0.01",
                    "-o", tmp_path / "r"]) == 0
    lines = capsys.readouterr().out.splitlines()
    power = rows(lines, next(i for i, line in enumerate(lines) if line.startswith("| measure")))
    assert power[0][5:] == ["Δ asked", "runs a side for Δ (power 0.8)"]
    records = json.loads((tmp_path / "r.json").read_text())
    for row, key, delta in ((power[2], "bleu", 0.5), (power[4], "nll", 0.01)):
        sd, _ = sig.pooled_sd([[run[key] for run in r["runs"]] for r in records])
        need = sig.runs_to_resolve(sd, delta, power=0.8)
        assert row[5:] == [f"{delta:g}", str(need) if need else "> 1,000"]
        planned = records[0]["power"][key]                 # and in OUT.json, every record's
        assert (planned["sd"], planned["delta"], planned["runs_for_delta"]) == (sd, delta, need)
    assert power[3][5:] == ["-", "-"]                                       # chrF: not asked
    assert "delta" not in records[0]["power"]["chrf"] and records[1]["power"] == records[0]["power"]
    for bad, message in (("ter=1", "MEASURE one of bleu, chrf, nll"), ("bleu=-1", "positive"),
                         ("bleu", "MEASURE=VALUE"), ("bleu=x", "positive")):
        assert run_cli(["report", *args, "--delta", bad]) == 2
        assert message in capsys.readouterr().err
    assert run_cli(["report", *args, "--delta", "bleu=1", "--delta", "bleu=2"]) == 2
    assert "bleu given twice" in capsys.readouterr().err


@pytest.mark.parametrize("prefix, says", [(".", "give a file name prefix"),
                                          ("", "an empty path"),
                                          ("..", "give a file name prefix")])
def test_an_output_prefix_that_names_a_folder_is_a_usage_error(tiny_model, tiny_bpe, tmp_path,
                                                              prefix, says, capsys,
                                                              monkeypatch):
    """-o is a file name prefix (OUT.json, OUT.png, OUT.md): a folder is refused, exit 2, before
    any score (it was a ValueError traceback)."""
    ref, good, _ = write_hyps(tiny_bpe, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert run_cli(["report", "--ref", ref, "--bootstrap", "0", "--shuffles", "0",
                    "-s", "x", tiny_model, good, "-o", prefix]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and says in err
