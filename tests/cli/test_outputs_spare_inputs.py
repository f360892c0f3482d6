"""An output file never replaces what the command reads: each command that writes files
(translate, rescore, contrastive, plot, inspect, score, report, analyze) refuses, with one line
naming the output and the input and before any work, an output that is one of its input files
(or a symbolic link to one), a file of a model it reads or a file in that model's checkpoints
folder. The input is left byte for byte as it was. (`export --force`, which replaces a folder:
tests/cli/test_export.py.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from depnmt.core.errors import DepnmtError
from depnmt.core.stagedir import check_output_files

from .conftest import run_cli

TREE = "1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n2\tdog\t_\t_\t_\t_\t1\tdep\t_\t_\n\n"


def files(tmp: Path, model: Path) -> dict[str, Path]:
    """The inputs of the cases below, written into ``tmp``."""
    made = {"src": "a dog runs .\n", "hyp": "ein Hund läuft .\n", "hyp.md": "ein Hund .\n",
            "set.tsv": "a dog .\tein Hund .\teine Hund .\tgender\n", "t.conllu": TREE,
            "src.tsv": "a dog runs .\n"}
    for name, text in made.items():
        (tmp / name).write_text(text, encoding="utf-8")
    (tmp / "link").symlink_to(tmp / "src")
    # named without dots for str.format: {hyp_md} is hyp.md
    return {name.replace(".", "_"): tmp / name for name in [*made, "link"]} | {"model": model}


CASES = {   # name: (arguments, the output named in the error, the input it would replace)
    "translate -o onto -i": (["translate", "-m", "{model}", "-i", "{src}", "-o", "{src}"],
                             "{src}", "{src}"),
    "translate -o onto a link to -i": (["translate", "-m", "{model}", "-i", "{src}", "-o",
                                        "{link}"], "{link}", "{src}"),
    "translate -o onto the model's config": (["translate", "-m", "{model}", "-i", "{src}",
                                              "-o", "{model}/config.json"],
                                             "{model}/config.json", "{model}/config.json"),
    "translate -o into the checkpoints": (["translate", "-m", "{model}", "-i", "{src}", "-o",
                                           "{model}/checkpoints/best.pt"],
                                          "{model}/checkpoints/best.pt",
                                          "{model}/checkpoints/best.pt"),
    "translate --induced-trees onto -i": (["translate", "-m", "{model}", "-i", "{src}",
                                           "--induced-trees", "{src}"], "{src}", "{src}"),
    "rescore -o onto --tgt": (["rescore", "-m", "{model}", "--src", "{src}", "--tgt", "{hyp}",
                               "-o", "{hyp}"], "{hyp}", "{hyp}"),
    "contrastive -o onto the set": (["contrastive", "-m", "{model}", "{set_tsv}", "-o",
                                     "{set_tsv}"], "{set_tsv}", "{set_tsv}"),
    "plot -o onto the log": (["plot", "-m", "{model}", "-o", "{model}/metrics.jsonl"],
                             "{model}/metrics.jsonl", "{model}/metrics.jsonl"),
    "inspect --png onto -i": (["inspect", "--scheme", "noabs+dep", "-i", "{t_conllu}", "--png",
                               "{t_conllu}"], "{t_conllu}", "{t_conllu}"),
    "score --bucket-plot onto a hyp": (["score", "-r", "{hyp}", "--src", "{src}",
                                        "--bucket-plot", "{hyp_md}", "{hyp}", "{hyp_md}"],
                                       "{hyp_md}", "{hyp_md}"),
    "report -o whose .md is a hyp": (["report", "--ref", "{hyp}", "-s", "a", "{model}",
                                      "{hyp_md}", "-o", "{hyp}"], "{hyp_md}", "{hyp_md}"),
    "analyze awsl -o whose .tsv is -i": (["analyze", "awsl", "-m", "{model}", "-i", "{src_tsv}",
                                          "-o", "{src}"], "{src_tsv}", "{src_tsv}"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_onto_an_input_is_refused(case, tiny_model, tmp_path, capsys):
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    given = {name: str(path) for name, path in files(tmp_path, model).items()}
    args, output, victim = (x.format_map(given) if isinstance(x, str) else
                            [a.format_map(given) for a in x] for x in CASES[case])
    before = Path(victim).read_bytes()
    assert run_cli(args) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "rror" in line]
    assert len(errors) == 1 and errors[0].startswith(f"error: {output}: the "), errors
    assert "which this command reads; choose another file" in errors[0]
    assert Path(victim).read_bytes() == before


def test_new_files_beside_the_inputs_are_written(tiny_model, tmp_path):
    """A translation into the model's folder (not one of its files) or beside the input is
    fine: only the inputs themselves are protected."""
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    (tmp_path / "src").write_text("a dog runs .\n", encoding="utf-8")
    assert run_cli(["translate", "-m", model, "-i", tmp_path / "src", "-o",
                    model / "test.hyp"]) == 0
    assert len((model / "test.hyp").read_text(encoding="utf-8").splitlines()) == 1


def test_check_output_files(tmp_path):
    (tmp_path / "in.txt").write_text("x")
    (tmp_path / "ckpt").mkdir()
    reads = [("input", tmp_path / "in.txt"), ("checkpoints", tmp_path / "ckpt"),
             ("optional", None)]
    check_output_files({"output": tmp_path / "out.txt", "none": None}, reads)
    check_output_files({"output": tmp_path / "ckpt-notes.txt"}, reads)   # beside, not inside
    with pytest.raises(DepnmtError, match=r"in.txt: the output would replace the input"):
        check_output_files({"output": tmp_path / "sub" / ".." / "in.txt"}, reads)
    with pytest.raises(DepnmtError, match=r"would be written into the checkpoints"):
        check_output_files({"output": tmp_path / "ckpt" / "new.pt"}, reads)
    with pytest.raises(DepnmtError, match=r"given as the output and as the plot"):
        check_output_files({"output": tmp_path / "a", "plot": tmp_path / "a"}, reads)
