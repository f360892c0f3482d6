"""``treedist`` end to end: trained through its flags, recorded with its own options only, and
translating pre-parsed input."""

from __future__ import annotations

import json

from depnmt.stages.parse import read_conllu, write_conllu

from .conftest import TINY_MODEL, import_random_trees, run_cli


def test_treedist_trains_records_its_options_and_translates(tiny_bpe, tmp_path_factory, tmp_path,
                                                             capsys):
    trees = import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given-td"), "parse-td",
                                ("en",), ["nsubj", "obj"], seed=2)
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "--trees", trees, "-o", model, *TINY_MODEL,
                    "--max-steps", "2", "--valid-every", "2", "--scheme", "abs+treedist",
                    "--treedist-k", "3", "--rel-k", "5"]) == 0
    assert "--rel-k is ignored" in capsys.readouterr().err
    schemes = json.loads((model / "config.json").read_text())["model"]["schemes"]
    assert schemes == [{"name": "abs", "options": {}},
                       {"name": "treedist", "options": {"subword_tree": "chain", "chain_head": "last",
                                                        "treedist_k": 3,
                                                        "treedist_terms": "key,value"}}]
    given = tmp_path / "in.conllu"
    write_conllu(given, list(read_conllu(trees / "test.en.conllu"))[:4])
    assert run_cli(["translate", "-m", model, "-i", given, "--input-format", "conllu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
