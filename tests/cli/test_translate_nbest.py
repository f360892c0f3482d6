"""``depnmt translate --nbest N`` (and ``depnmt.Translator.translate(nbest=N)``), ``-o/--output``
written all or nothing, and the length limits' units and defaults in ``--help``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import depnmt
from depnmt.core.errors import DepnmtError

from .conftest import run_cli

SCORE = r"(-?\d+\.\d{4}|-inf)"
NBEST_LINE = re.compile(rf"^(\d+) \|\|\| (.*) \|\|\| {SCORE} \|\|\| {SCORE}$")


def source_file(tiny_bpe: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """Five test sentences with an empty line in the middle, written to ``in.txt``."""
    lines = (tiny_bpe.parent / "prepare" / "test.raw.en").read_text().splitlines()[:5]
    lines = [*lines[:2], "", *lines[2:]]
    path = tmp_path / "in.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path, lines


def translate(model: Path, source: Path, capsys, *flags) -> tuple[int, str, str]:
    """``depnmt translate -m MODEL -i SOURCE FLAGS``: exit status, stdout, stderr."""
    capsys.readouterr()
    rc = run_cli(["translate", "-m", model, "-i", source, *flags])
    out, err = capsys.readouterr()
    return rc, out, err


def parse_nbest(text: str) -> dict[int, list[tuple[str, float, float]]]:
    """SENT_ID -> [(hypothesis, score, logprob)] in file order; every line must match."""
    lists: dict[int, list] = {}
    for line in text.splitlines():
        match = NBEST_LINE.match(line)
        assert match, line
        lists.setdefault(int(match[1]), []).append((match[2], float(match[3]), float(match[4])))
    return lists


def test_nbest_lists_follow_the_documented_format(tiny_model, tiny_bpe, tmp_path, capsys):
    source, lines = source_file(tiny_bpe, tmp_path)
    rc, best, _ = translate(tiny_model, source, capsys, "--beam", "3")
    assert rc == 0
    rc, out, err = translate(tiny_model, source, capsys, "--beam", "3", "--nbest", "3")
    assert rc == 0, err
    lists = parse_nbest(out)
    assert list(lists) == list(range(len(lines)))            # every line, in order, from 0
    assert [entries[0][0] for entries in lists.values()] == best.splitlines()
    assert lists[2] == [("", 0.0, 0.0)]                       # the empty line
    for i, entries in lists.items():
        if i != 2:
            assert len(entries) == 3
            scores = [score for _, score, _ in entries]
            assert scores == sorted(scores, reverse=True)
            assert all(logprob < 0 for _, _, logprob in entries)


def test_nbest_of_greedy_search_is_its_output_with_a_score(tiny_model, tiny_bpe, tmp_path,
                                                           capsys):
    source, lines = source_file(tiny_bpe, tmp_path)
    _, greedy, _ = translate(tiny_model, source, capsys, "--beam", "1")
    rc, out, err = translate(tiny_model, source, capsys, "--beam", "1", "--nbest", "1")
    assert rc == 0, err
    lists = parse_nbest(out)
    assert [[hyp for hyp, _, _ in entries] for entries in lists.values()] == \
        [[line] for line in greedy.splitlines()]


@pytest.mark.parametrize("flags, whose", [(["--beam", "2", "--nbest", "3"], r"--beam: 2"),
                                          (["--nbest", "3"], r"the model's default beam: 2")])
def test_nbest_beyond_the_beam_is_one_line_error(tiny_model, tiny_bpe, tmp_path, capsys, flags,
                                                 whose):
    source, _ = source_file(tiny_bpe, tmp_path)
    rc, out, err = translate(tiny_model, source, capsys, *flags)
    assert rc != 0 and out == ""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    assert re.fullmatch(rf"error: --nbest 3 is more than the beam size \({whose}\); .*"
                        rf"give --beam 3 or more", errors[0]), errors[0]


def test_output_file_holds_what_stdout_would(tiny_model, tiny_bpe, tmp_path, capsys):
    source, lines = source_file(tiny_bpe, tmp_path)
    _, expected, _ = translate(tiny_model, source, capsys)
    out_file = tmp_path / "sub" / "out.txt"
    rc, out, err = translate(tiny_model, source, capsys, "-o", out_file)
    assert rc == 0 and out == "", err
    assert out_file.read_text(encoding="utf-8") == expected
    assert len(expected.splitlines()) == len(lines)
    rc, _, _ = translate(tiny_model, source, capsys, "--output", out_file, "--beam", "2",
                         "--nbest", "2")
    assert rc == 0 and parse_nbest(out_file.read_text(encoding="utf-8"))


def test_a_failed_run_leaves_the_output_file_as_it_was(tiny_model, tiny_bpe, tmp_path, capsys,
                                                       monkeypatch):
    """Translations are streamed in chunks; the first chunk is translated before the second
    fails, yet FILE keeps its old contents and no temporary file is left."""
    import depnmt.decoding.translate as translate_module
    source, lines = source_file(tiny_bpe, tmp_path)
    monkeypatch.setattr(translate_module, "CHUNK_LINES", 2)
    chunk = translate_module.Translator._translate_chunk
    calls: list[int] = []

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise DepnmtError("simulated failure in the second chunk")
        return chunk(self, *args, **kwargs)
    monkeypatch.setattr(translate_module.Translator, "_translate_chunk", failing)
    out_file = tmp_path / "out.txt"
    out_file.write_text("old\n", encoding="utf-8")
    rc, out, err = translate(tiny_model, source, capsys, "-o", out_file)
    assert rc != 0 and "simulated failure" in err and len(calls) == 2
    assert out_file.read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]
    calls.clear()
    rc, out, err = translate(tiny_model, source, capsys)        # standard output streams
    assert rc != 0 and len(out.splitlines()) == 2


def test_help_states_the_length_limits_units_and_defaults(capsys):
    capsys.readouterr()
    assert run_cli(["translate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "ceil(A × source subwords + B) − 1 target subwords" in text
    assert "[default: (the model's, else 1.5); 0<=x<=100.0]" in text       # searchlimits
    assert "[default: (the model's, else 10); 0<=x<=100000]" in text
    assert "250 source subwords" in text
    assert "SENT_ID ||| hypothesis ||| score ||| logprob" in text


def test_api_nbest_is_the_command_s(tiny_model, tiny_bpe, tmp_path, capsys):
    source, lines = source_file(tiny_bpe, tmp_path)
    translator = depnmt.Translator.load(tiny_model, device="cpu")
    lists = translator.translate(lines, beam=3, nbest=2)
    _, out, _ = translate(tiny_model, source, capsys, "--beam", "3", "--nbest", "2")
    assert [[(t.text, round(t.score, 4), round(t.logprob, 4)) for t in entries]
            for entries in lists] == list(parse_nbest(out).values())
    assert [entries[0].text for entries in lists] == translator.translate(lines, beam=3)
    assert all(isinstance(text, str) for text in translator.translate(lines))
    with pytest.raises(DepnmtError, match=r"nbest 3 is more than the beam \(2\)"):
        translator.translate(lines, nbest=3)
    with pytest.raises(DepnmtError, match="at least 1"):
        translator.translate(lines, beam=3, nbest=0)


@pytest.fixture(scope="module")
def ct2_export(tiny_model, tmp_path_factory) -> Path:
    pytest.importorskip("ctranslate2",
                        reason="CTranslate2 is an optional extra (pip install depnmt[ct2])")
    out = tmp_path_factory.mktemp("ct2") / "export"
    assert run_cli(["export", "--format", "ctranslate2", "-m", tiny_model, "-o", out]) == 0
    return out


@pytest.mark.parametrize("beam, alpha", [(3, "0.6"), (1, "0.6")])
def test_ct2_nbest_scores_are_the_models_log_probabilities(ct2_export, tiny_model, tiny_bpe,
                                                           tmp_path, capsys, beam, alpha):
    """``--ct2 --nbest``: the format of the torch path; the first hypothesis is --ct2's
    translation, and logprob is the model's log-probability of the hypothesis (teacher-forced
    by depnmt's own model; with its EOS, or without for one cut at the limit)."""
    import torch

    from depnmt.core.vocab import BOS, EOS
    from depnmt.data.batches import encode_source
    from depnmt.decoding.ct2translate import CT2Translator
    from depnmt.decoding.translate import Translator
    source, lines = source_file(tiny_bpe, tmp_path)
    flags = ["--ct2", ct2_export, "--beam", str(beam), "--alpha", alpha]
    rc, best, err = translate(tiny_model, source, capsys, *flags)
    assert rc == 0, err
    rc, out, err = translate(tiny_model, source, capsys, *flags, "--nbest", str(beam))
    assert rc == 0, err
    lists = parse_nbest(out)
    assert [entries[0][0] for entries in lists.values()] == best.splitlines()
    assert lists[2] == [("", 0.0, 0.0)] and all(len(lists[i]) == beam for i in (0, 1, 3, 4))
    ct2 = CT2Translator.from_dir(ct2_export, beam=beam, alpha=float(alpha))
    ours = Translator.from_model_dir(tiny_model, device="cpu", precision="fp32")
    checked = 0
    for line in (lines[0], lines[1], lines[3], lines[4]):
        words = ct2.src_tokenizer.tokenize(line)
        src = torch.tensor([encode_source(ct2.segmenter.segment(words), ours.src_vocab)])
        limit = ct2.limit(len(ct2.segmenter.segment(words)))
        for subwords, score, logprob in ct2.nbest_subwords([ct2.segmenter.segment(words)],
                                                           beam)[0]:
            cut = len(subwords) == limit - 1             # at the limit: no EOS scored
            ids = ours.tgt_vocab.encode(subwords) + ([] if cut else [EOS])
            with torch.no_grad():
                logits = ours.model(src, torch.tensor([[BOS] + ids[:-1]]), {})[0]
            expected = float(torch.log_softmax(logits[0], -1)[torch.arange(len(ids)), ids].sum())
            assert logprob == pytest.approx(expected, abs=1e-3)
            checked += 1
    assert checked == 4 * beam
