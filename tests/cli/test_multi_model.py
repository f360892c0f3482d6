"""Several models, and an option given twice: `rescore -m A -m B` scores with the ensemble
`translate -m A -m B` decodes with (the score of its own translation is its search's score),
`contrastive --ensemble` evaluates it, and an option that takes one value, given twice on any
command, is a usage error naming it instead of click's silent "the last one wins"."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from depnmt.commands.helpgroups import takes_one_value
from depnmt.decoding.forced import ForcedScorer

from .conftest import TINY_MODEL, other_segmentation, run_cli
from .test_cli_grammar import COMMANDS


def occurrence(option: click.Option) -> list[str]:
    """The option given once on a command line: its first flag and, unless it is a flag, as
    many placeholder values as it takes."""
    return [option.opts[0], *(["x"] * (0 if option.is_flag else option.nargs))]


def options(kind) -> list[tuple[str, click.Option]]:
    """(command path, option) of every option of every command for which ``kind`` holds."""
    return [(path, p) for path, command in COMMANDS.items() for p in command.params
            if isinstance(p, click.Option) and kind(p)]


SINGLE = options(takes_one_value)
REPEATABLE = options(lambda p: p.multiple or p.count)


@pytest.mark.parametrize("path,option", SINGLE, ids=[f"{c}:{o.name}" for c, o in SINGLE])
def test_an_option_that_takes_one_value_given_twice_is_a_usage_error(path, option, capsys):
    """Every command, every option that takes one value (flags too): exit status 2 and one
    error line naming the option, before anything runs."""
    capsys.readouterr()
    assert run_cli([*path.split(), *occurrence(option), *occurrence(option)]) == 2
    err = capsys.readouterr().err
    names = "/".join([*option.opts, *option.secondary_opts])
    why = "a flag: give it once" if option.is_flag else "it takes one value"
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: option {names} given twice ({why})"], err
    assert "Traceback" not in err


def test_every_command_is_checked():
    """The commands have single-valued options, among them those the report named."""
    assert {"rescore", "translate", "export", "average", "score", "train"} <= {
        path for path, _ in SINGLE}
    assert {("translate", "beam"), ("rescore", "alpha"), ("export", "model_dir"),
            ("average", "model_dir")} <= {(path, o.name) for path, o in SINGLE}
    assert ("rescore", "model_dirs") in {(path, o.name) for path, o in REPEATABLE}


@pytest.mark.parametrize("path,option", REPEATABLE, ids=[f"{c}:{o.name}" for c, o in REPEATABLE])
def test_options_given_several_times_on_purpose_stay_allowed(path, option):
    """multiple=True options (-m of translate, rescore, contrastive; -r of score) and counts
    parse when given twice (the parser alone: nothing runs)."""
    command = COMMANDS[path]
    ctx = click.Context(command, info_name=path)
    opts, _, _ = command.make_parser(ctx).parse_args([*occurrence(option), *occurrence(option)])
    assert len(opts[option.name]) == 2 or opts[option.name] == 2


def test_the_two_spellings_of_one_option_count_as_the_same_option(capsys):
    capsys.readouterr()
    assert run_cli(["translate", "--beam", "4", "--beam=5"]) == 2
    assert run_cli(["average", "-m", "A", "--model", "B"]) == 2
    err = capsys.readouterr().err
    assert "Error: option --beam given twice (it takes one value)" in err
    assert "Error: option -m/--model given twice (it takes one value)" in err


# -- rescore and contrastive with several models -----------------------------------------------
def rescore(tmp_path: Path, src: Path, tgt: Path, *args) -> list[tuple[float, float, int]]:
    out = tmp_path / "scores.tsv"
    assert run_cli(["rescore", *args, "--src", src, "--tgt", tgt, "-o", out,
                    "--precision", "fp32"]) == 0
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
    return [(float(r[0]), float(r[1]), int(r[2])) for r in rows]


def test_rescore_scores_with_the_ensemble(seeds, tiny_bpe, tmp_path):
    """-m A -m B is neither A nor B (before: exactly B, the last -m); A with itself is A."""
    a, b = seeds
    prepare = tiny_bpe.parent / "prepare"
    src, ref = prepare / "test.raw.en", prepare / "test.raw.de"
    alone_a, alone_b = (rescore(tmp_path, src, ref, "-m", m) for m in seeds)
    both = rescore(tmp_path, src, ref, "-m", a, "-m", b)
    assert len(both) == len(alone_a) == 30
    assert all(x[2] == y[2] == z[2] for x, y, z in zip(both, alone_a, alone_b))
    assert sum(abs(x[1] - y[1]) for x, y in zip(both, alone_b)) > 0.1
    assert sum(abs(x[1] - y[1]) for x, y in zip(both, alone_a)) > 0.1
    itself = rescore(tmp_path, src, ref, "-m", a, "-m", a)
    assert all(abs(x[1] - y[1]) < 1e-4 for x, y in zip(itself, alone_a))


def test_rescoring_the_ensembles_nbest_gives_its_search_scores(seeds, tiny_bpe, tmp_path):
    """translate -m A -m B --nbest 2, then rescore -m A -m B of its hypotheses: each score and
    log-probability is the search's (where the text splits again into the same subwords)."""
    a, b = seeds
    src = tiny_bpe.parent / "prepare" / "test.raw.en"
    nbest = tmp_path / "nbest.txt"
    assert run_cli(["translate", "-m", a, "-m", b, "--nbest", "2", "--beam", "2", "-i", src,
                    "-o", nbest, "--precision", "fp32"]) == 0
    rows = [line.split(" ||| ") for line in nbest.read_text(encoding="utf-8").splitlines()]
    sources = src.read_text(encoding="utf-8").splitlines()
    (tmp_path / "src").write_text("".join(sources[int(r[0])] + "\n" for r in rows),
                                  encoding="utf-8")
    (tmp_path / "hyp").write_text("".join(r[1] + "\n" for r in rows), encoding="utf-8")
    scores = rescore(tmp_path, tmp_path / "src", tmp_path / "hyp", "-m", a, "-m", b)
    scorer = ForcedScorer.from_model_dirs([a, b], device="cpu", precision="fp32")
    alone = ForcedScorer.from_model_dir(b, device="cpu", precision="fp32")
    same = [i for i, r in enumerate(rows) if r[1] and len(scorer.target_ids(r[1])) + 1
            == scores[i][2] and scorer.translator.to_text(scorer.target_ids(r[1])) == r[1]]
    assert len(same) >= len(rows) // 4
    for i in same:
        assert abs(scores[i][0] - float(rows[i][2])) < 2e-4, (rows[i], scores[i])
        assert abs(scores[i][1] - float(rows[i][3])) < 2e-4, (rows[i], scores[i])
    by_b = alone.score_lines([sources[int(rows[i][0])] for i in same], [rows[i][1] for i in same])
    assert sum(abs(x.logprob - scores[i][1]) for x, i in zip(by_b, same)) > 0.1


def test_models_that_cannot_score_together(seeds, tiny_bpe, tmp_path, capsys):
    other = other_segmentation(tiny_bpe, tmp_path / "bpe-other")
    stranger = tmp_path / "stranger"
    assert run_cli(["train", "-i", other, "-o", stranger, *TINY_MODEL, "--max-steps", "2"]) == 0
    prepare = tiny_bpe.parent / "prepare"
    capsys.readouterr()
    assert run_cli(["rescore", "-m", seeds[0], "-m", stranger, "--src", prepare / "test.raw.en",
                    "--tgt", prepare / "test.raw.de"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {stranger}: its ") and "differs from" in err, err
    assert run_cli(["rescore", "-m", seeds[0], "-m", seeds[1], "-c", "x/y.pt",
                    "--src", prepare / "test.raw.en", "--tgt", prepare / "test.raw.de"]) == 2
    assert "an ensemble takes a checkpoint name" in capsys.readouterr().err
    with pytest.raises(TypeError, match="from_model_dirs"):
        ForcedScorer.from_model_dir([seeds[0], seeds[1]])


def test_contrastive_ensemble_is_one_column_of_the_ensembles_decisions(seeds, tiny_bpe,
                                                                       tmp_path, capsys):
    """contrastive -m A -m B compares A and B; with --ensemble, one column: the decisions of
    the ensemble's forced scores (rescore -m A -m B)."""
    import json
    prepare = tiny_bpe.parent / "prepare"
    sources = (prepare / "test.raw.en").read_text(encoding="utf-8").splitlines()
    refs = (prepare / "test.raw.de").read_text(encoding="utf-8").splitlines()
    variants = [" ".join(r.split()[::-1]) for r in refs]
    items = [(s, r, v) for s, r, v in zip(sources, refs, variants) if r != v]
    tsv = tmp_path / "set.tsv"
    tsv.write_text("".join("\t".join(it) + "\n" for it in items), encoding="utf-8")
    args = [x for m in seeds for x in ("-m", m)]
    capsys.readouterr()
    assert run_cli(["contrastive", *args, "--ensemble", tsv, "-o", tmp_path / "e.json"]) == 0
    table = capsys.readouterr().out
    result = json.loads((tmp_path / "e.json").read_text(encoding="utf-8"))
    name = f"{seeds[0]} + {seeds[1]}"
    assert list(result["models"]) == [name] and name in table and "McNemar" not in table
    scorer = ForcedScorer.from_model_dirs(seeds, device="cpu")
    ref = scorer.score_lines([s for s, _, _ in items], [r for _, r, _ in items])
    var = scorer.score_lines([s for s, _, _ in items], [v for _, _, v in items])
    assert result["models"][name]["decisions"] == [int(r.logprob > v.logprob)
                                                   for r, v in zip(ref, var)]
    assert run_cli(["contrastive", "-m", seeds[0], "--ensemble", tsv]) == 2
    assert "--ensemble scores with several models" in capsys.readouterr().err
