"""Scheme names: one name per system everywhere (train --scheme, recipes, inspect, report),
layers counted from 1, one chain-head default; the 0.1.0 spellings keep their exact meaning
with one warning, and 0.1.0 model configs load silently as the same model."""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from depnmt.core import compat
from depnmt.core.layerlists import parse_layers
from depnmt.core.schemename import scheme_name
from depnmt.model.schemes.names import parse_name, part_names
from depnmt.model.schemes.registry import scheme_entries
from depnmt.model.schemes.upgrade import upgrade_model_config
from depnmt.model.transformer import ModelConfig, TransformerNMT
from depnmt.training.config import today_terms

REPO = Path(__file__).resolve().parents[2]
SAFE = re.compile(r"[A-Za-z0-9+._-]+")

# today's name -> (components, options the name sets)
CANONICAL = {
    "abs": (["abs"], {}),
    "noabs": (["none"], {}),
    "abs+rel": (["abs", "rel"], {}),
    "abs+dep": (["abs", "dep"], {}),
    "abs+dep+rel": (["abs", "dep", "rel"], {}),
    "abs+deplabel": (["abs", "deplabel"], {}),
    "abs+deplabel+rel": (["abs", "deplabel_rel"], {}),
    "abs+dbsa-enc": (["abs", "dbsa_enc"], {}),
    "abs+dbsa-dec": (["abs", "dbsa_dec"], {}),
    "abs+dbsa-enc+dbsa-dec": (["abs", "dbsa_enc", "dbsa_dec"], {}),
    "abs+lisa": (["abs", "dbsa_enc"], {"dbsa_enc_layer": 1, "dbsa_scorer": "deep"}),
    "abs+gps": (["abs", "gps"], {}),
    "abs+gps-all": (["abs", "gps"], {"gps_layer": "all"}),
    "abs+gps-layer4": (["abs", "gps"], {"gps_layer": "4"}),
    "abs+pascal": (["abs", "pascal"], {}),
    "abs+structural": (["abs", "structural"], {}),
    "abs+treedist": (["abs", "treedist"], {}),
    "abs+factors": (["abs", "factors"], {}),
    "abs+factors-concat": (["abs", "factors"], {"factor_combine": "concat"}),
    "noabs+dep": (["dep"], {}),
    "noabs+dep-bV": (["dep"], {"dep_terms": "value"}),
    "noabs+dep-bK": (["dep"], {"dep_terms": "key"}),
    "abs+dep+rel+dbsa-enc": (["abs", "dep", "rel", "dbsa_enc"], {}),
}
FIRST = {"dbsa_chain_head": "first"}          # DBSA's 0.1.0 chain head
# a 0.1.0 `train --scheme` spelling -> (today's name, its 0.1.0 components and options)
OLD_CLI = {
    "Transformer_abs": ("abs", ["abs"], {}),
    "Transformer_rel": ("abs+rel", ["abs", "rel"], {}),
    "Transformer_dep": ("abs+dep", ["abs", "dep"], {}),
    "Transformer_dep+rel": ("abs+dep+rel", ["abs", "dep", "rel"], {}),
    "Transformer_deplabel": ("abs+deplabel", ["abs", "deplabel"], {}),
    "Transformer_deplabel+rel": ("abs+deplabel+rel", ["abs", "deplabel_rel"], {}),
    "Transformer_abs+DBSA(Enc)": ("abs+dbsa-enc", ["abs", "dbsa_enc"], FIRST),
    "Transformer_abs+DBSA(Dec)": ("abs+dbsa-dec", ["abs", "dbsa_dec"], FIRST),
    "Transformer_abs+DBSA(Enc)+DBSA(Dec)": ("abs+dbsa-enc+dbsa-dec",
                                            ["abs", "dbsa_enc", "dbsa_dec"], FIRST),
    "Transformer_pascal": ("abs+pascal", ["abs", "pascal"], {}),
    "Transformer_structural": ("abs+structural", ["abs", "structural"], {}),
    "Transformer_gps": ("abs+gps", ["abs", "gps"], {}),
    "Transformer_treedist": ("abs+treedist", ["abs", "treedist"], {}),
    "Transformer_factors": ("abs+factors", ["abs", "factors"], {}),
    "none": ("noabs", ["none"], {}),
    "rel": ("noabs+rel", ["rel"], {}),                  # 0.1.0: no absolute PE
    "dep": ("noabs+dep", ["dep"], {}),
    "dep+rel": ("noabs+dep+rel", ["dep", "rel"], {}),
    "deplabel+rel": ("noabs+deplabel+rel", ["deplabel_rel"], {}),
    "gps": ("noabs+gps", ["gps"], {}),
    "dbsa_enc": ("noabs+dbsa-enc", ["dbsa_enc"], FIRST),
    "abs+dbsa_enc+dbsa_dec": ("abs+dbsa-enc+dbsa-dec", ["abs", "dbsa_enc", "dbsa_dec"], FIRST),
    "abs+deplabel_rel": ("abs+deplabel+rel", ["abs", "deplabel_rel"], {}),
}
# a 0.1.0 recipe system -> its 0.1.0 `depnmt train` meaning (components, options; DBSA_LAYER=2)
OLD_RECIPE = {
    "rel": (["abs", "rel"], {}), "dep": (["abs", "dep"], {}),
    "dep+rel": (["abs", "dep", "rel"], {}), "deplabel": (["abs", "deplabel"], {}),
    "deplabel+rel": (["abs", "deplabel_rel"], {}),
    "dbsa-enc": (["abs", "dbsa_enc"], {"dbsa_enc_layer": 2, **FIRST}),
    "dbsa-dec": (["abs", "dbsa_dec"], {"dbsa_dec_layer": 2, **FIRST}),
    "dbsa-enc+dec": (["abs", "dbsa_enc", "dbsa_dec"],
                     {"dbsa_enc_layer": 2, "dbsa_dec_layer": 2, **FIRST}),
    "lisa": (["abs", "dbsa_enc"], {"dbsa_enc_layer": 1, "dbsa_scorer": "deep", **FIRST}),
    "gps": (["abs", "gps"], {"gps_layers": "0"}),
    "gps-all": (["abs", "gps"], {"gps_layers": "all"}),
    "gps-3": (["abs", "gps"], {"gps_layers": "3"}),            # GPS Table 3, 0-based
    "pascal": (["abs", "pascal"], {}), "structural": (["abs", "structural"], {}),
    "treedist": (["abs", "treedist"], {}), "factors": (["abs", "factors"], {}),
    "factors-concat": (["abs", "factors"], {"factor_combine": "concat"}),
    "dep-noabs": (["dep"], {}), "dep-noabs-bV": (["dep"], {"dep_terms": "value"}),
    "dep-noabs-bK": (["dep"], {"dep_terms": "key"}), "noabs": (["none"], {}),
    "abs": (["abs"], {}), "multitask": (["abs"], {}),
}


@pytest.fixture(autouse=True)
def fresh_warnings():
    """Each test sees the first use of a spelling (warnings are once per process)."""
    compat._WARNED.clear()
    yield
    compat._WARNED.clear()


def entries(components: list[str], options: dict) -> list[dict]:
    return scheme_entries(components, options)


def recipe_names() -> list[str]:
    """The recipes' system lists (ALL_SYSTEMS, ABLATION_SYSTEMS, BASELINE_SYSTEMS)."""
    out = subprocess.run(["bash", "-c", f". {REPO}/recipes/lib/compare.sh; echo $ALL_SYSTEMS "
                                        "$ABLATION_SYSTEMS $BASELINE_SYSTEMS"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def test_names_need_no_shell_quoting():
    names = list(CANONICAL) + part_names() + recipe_names()
    assert [n for n in names if not SAFE.fullmatch(n)] == []
    assert not SAFE.fullmatch("Transformer_abs+DBSA(Enc)")            # 0.1.0 needed quotes


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_every_name_resolves_without_a_warning(name, capsys):
    components, options = CANONICAL[name]
    got = parse_name(name)
    assert (got.components, got.options, got.canonical) == (components, options, name)
    assert capsys.readouterr().err == ""


def test_recipe_systems_are_scheme_names(capsys):
    """Every system of the recipes' lists is a `train --scheme` name (but multitask, a data
    baseline), with no warning."""
    for name in recipe_names():
        if name != "multitask":
            assert parse_name(name).canonical == name
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("old", sorted(OLD_CLI))
def test_old_train_spellings_keep_their_meaning_and_warn_once(old, capsys):
    new, components, options = OLD_CLI[old]
    first, second = parse_name(old), parse_name(old)
    assert first.components == second.components == components
    assert first.options == options and first.canonical == new
    err = capsys.readouterr().err
    assert err == (f"warning: {old} is deprecated; use {new} (the old spelling goes in "
                   f"0.3.0)\n")
    assert parse_name(new).components == components and SAFE.fullmatch(new)


def test_a_name_must_say_whether_it_keeps_the_absolute_pe():
    from depnmt.core.errors import DepnmtError
    with pytest.raises(DepnmtError, match="abs[+]dbsa-enc keeps it, noabs[+]dbsa-enc drops it"):
        parse_name("dbsa-enc")
    with pytest.raises(DepnmtError, match="once"):
        parse_name("abs+noabs+dep")
    with pytest.raises(DepnmtError, match="unknown positional scheme 'abs[+]nope'"):
        parse_name("abs+nope")


def train_config(monkeypatch, tmp_path, *args) -> tuple[dict, str]:
    """``depnmt train ARGS`` up to the training itself: (the model config's scheme entries
    as the run would save them, stderr)."""
    import depnmt.training.job
    from depnmt.commands.train import command
    seen = {}
    monkeypatch.setattr(depnmt.training.job, "train", lambda run: seen.update(config=run))
    result = CliRunner().invoke(command, ["-i", str(tmp_path / "bpe"), "-o",
                                          str(tmp_path / "model"), "--layers", "3", *args],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return seen["config"].model.schemes, result.stderr if hasattr(result, "stderr") else ""


def test_train_takes_todays_names_and_old_spellings_alike(monkeypatch, tmp_path):
    new, err = train_config(monkeypatch, tmp_path, "--scheme", "abs+gps-all")
    assert new == entries(["abs", "gps"], {"gps_layer": "all"}) and "warning" not in err
    old, err = train_config(monkeypatch, tmp_path, "--scheme", "Transformer_gps",
                            "--gps-layers", "all")
    assert old == new
    assert "Transformer_gps is deprecated; use abs+gps" in err
    assert ("warning: --gps-layers all is deprecated; use --gps-layer all (the old spelling "
            "goes in 0.3.0)") in err
    layer, err = train_config(monkeypatch, tmp_path, "--scheme", "abs+gps", "--gps-layers", "1")
    assert layer[1]["options"]["gps_layer"] == "2"               # 0-based 1 = the 2nd layer
    assert "--gps-layers 1 is deprecated; use --gps-layer 2" in err
    flag, _ = train_config(monkeypatch, tmp_path, "--scheme", "abs+gps-all", "--gps-layer", "3")
    assert flag[1]["options"]["gps_layer"] == "3"                # a given flag wins
    dbsa, _ = train_config(monkeypatch, tmp_path, "--scheme", "Transformer_abs+DBSA(Enc)")
    assert dbsa[1]["options"]["dbsa_chain_head"] == "first"      # as in 0.1.0
    today, _ = train_config(monkeypatch, tmp_path, "--scheme", "abs+dbsa-enc")
    assert today[1]["options"]["dbsa_chain_head"] == "last"


def test_old_and_new_layer_flags_together_are_a_usage_error():
    from depnmt.core.errors import UsageError
    params = {"scheme": "abs+gps", "gps_layer": "2", "gps_layers": "0"}
    with pytest.raises(UsageError, match="--gps-layers .* and --gps-layer"):
        today_terms(params, {"gps_layer", "gps_layers"})


def test_layers_are_counted_from_one():
    from depnmt.core.errors import DepnmtError
    assert parse_layers("1", 3) == [0] and parse_layers("1,3", 3) == [0, 2]
    assert parse_layers("all", 2) == [0, 1]
    with pytest.raises(DepnmtError, match="numbered 1..3"):
        parse_layers("0", 3)
    with pytest.raises(DepnmtError, match="numbered 1..3"):
        parse_layers("4", 3)


def test_one_chain_head_default():
    from depnmt.model.schemes.dbsa import DBSAOptions
    from depnmt.model.schemes.options import SubwordTreeOptions
    assert DBSAOptions().dbsa_chain_head == SubwordTreeOptions().chain_head == "last"


def test_recipes_keep_the_0_1_0_meaning_of_every_system(monkeypatch, tmp_path):
    """compare.sh: each 0.1.0 system name gives flags that make the model 0.1.0 made, and
    warns; today's names give the same model without a warning."""
    script = (f". {REPO}/recipes/lib/compare.sh; DBSA_LAYER=2; for s in "
              f"{' '.join(OLD_RECIPE)}; do system_flags \"$s\"; echo \"$s|${{FLAGS[*]}}\"; done")
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    flags = dict(line.split("|") for line in result.stdout.splitlines())
    for name, (components, options) in OLD_RECIPE.items():
        got, _ = train_config(monkeypatch, tmp_path, *flags[name].split())
        assert got == entries(components, options), name
        deprecated = name not in ("abs", "noabs", "multitask")
        assert (f"warning: system {name} is deprecated" in result.stderr) == deprecated, name


def test_recipes_continue_a_0_1_0_campaign_in_its_folders(tmp_path):
    (tmp_path / "models" / "rel").mkdir(parents=True)
    (tmp_path / "models" / "dbsa-enc").mkdir(parents=True)
    script = (f". {REPO}/recipes/lib/compare.sh; for s in abs+rel abs+dep abs+dbsa-enc; do "
              f"system_folder $s {tmp_path}; done")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    # DBSA's default changed: a 0.1.0 dbsa-enc run is not today's abs+dbsa-enc
    assert out.stdout.split() == ["rel", "abs+dep", "abs+dbsa-enc"]


# -- model configs of 0.1.0 ---------------------------------------------------------------------

def old_model(schemes: list[dict]) -> dict:
    return {"src_vocab_size": 30, "tgt_vocab_size": 30, "d_model": 16, "n_heads": 2,
            "d_ff": 32, "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0,
            "schemes": schemes}


OLD_SCHEMES = [   # as 0.1.0 saved them: 0-based layer lists, DBSA saved with its chain head
    {"name": "abs", "options": {}},
    {"name": "gps", "options": {"gps_layers": "1", "gps_dim": None, "gps_dropout": 0.0,
                                "gps_labels": ["nsubj", "obj", "root"]}},
    {"name": "pascal", "options": {"pascal_layers": "0", "pascal_heads": 1, "pascal_sigma": 1.0,
                                   "pascal_parent": "mean", "pascal_parent_ignoring": 0.0,
                                   "pascal_layer_heads": None, "pascal_weighting": "normal",
                                   "pascal_window": 1.0}},
    {"name": "dbsa_enc", "options": {"dbsa_enc_layer": 2, "dbsa_lambda_enc": 1.0,
                                     "dbsa_scorer": "biaffine", "dbsa_heads": 1}},
]


def test_old_model_configs_load_silently_as_the_same_model(capsys):
    upgraded = upgrade_model_config(copy.deepcopy(old_model(OLD_SCHEMES)))
    by_name = {e["name"]: e["options"] for e in upgraded["schemes"]}
    assert by_name["gps"]["gps_layer"] == "2" and "gps_layers" not in by_name["gps"]
    assert by_name["pascal"]["pascal_layer"] == "1"
    assert by_name["dbsa_enc"]["dbsa_chain_head"] == "first"      # saved without: 0.1.0's
    today = copy.deepcopy(upgraded)
    torch.manual_seed(0)
    old = TransformerNMT(ModelConfig.from_dict(old_model(OLD_SCHEMES)))
    torch.manual_seed(0)
    new = TransformerNMT(ModelConfig.from_dict(today))
    assert list(old.state_dict()) == list(new.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(old.state_dict().values(),
                                                  new.state_dict().values()))
    gps, pascal, dbsa = old.schemes.parts[1:]        # the layers 0.1.0 built (0-based inside)
    assert gps.layers == [1] and "schemes.parts.1.query.1.weight" in old.state_dict()
    assert pascal.layers == [0] and dbsa.layer == 1 and dbsa.chain_head == "first"
    assert capsys.readouterr().err == ""
    assert upgrade_model_config(upgraded) == upgraded               # idempotent


def test_published_runs_load_without_a_warning(capsys):
    from depnmt.storage.modeldir import read_config
    folder = REPO / "docs" / "results" / "multi30k-en-de" / "compare-plateau" / "models" / "gps"
    model = ModelConfig.from_dict(read_config(folder)["model"])
    gps = next(e for e in model.schemes if e["name"] == "gps")
    assert gps["options"]["gps_layer"] == "1"                      # saved 0-based "0"
    assert scheme_name(model.schemes) == "abs+gps"
    assert capsys.readouterr().err == ""


def test_scheme_name_of_saved_entries():
    assert scheme_name(entries(["abs", "dbsa_enc"], {})) == "abs+dbsa-enc"
    assert scheme_name(entries(["dep"], {})) == "noabs+dep"
    assert scheme_name(entries(["none"], {})) == "noabs"
    assert scheme_name(entries(["abs", "deplabel_rel"], {})) == "abs+deplabel+rel"
    for name in CANONICAL:                               # names without variants round-trip
        if not CANONICAL[name][1]:
            assert scheme_name(entries(*CANONICAL[name])) == name


# -- inspect --------------------------------------------------------------------------------

CONLLU = ("1\tMy\t_\t_\t_\t_\t2\tposs\t_\t_\n2\tfather\t_\t_\t_\t_\t3\tnsubj\t_\t_\n"
          "3\tbought\t_\t_\t_\t_\t0\troot\t_\t_\n\n")


def inspect(*args: str):
    from depnmt.commands.inspect import command
    return CliRunner().invoke(command, list(args), input=CONLLU)


def test_inspect_takes_scheme_names():
    assert inspect("--scheme", "abs+gps").output == ("My\troot>nsubj>poss\nfather\troot>nsubj\n"
                                                     "bought\troot\n")
    assert inspect("--scheme", "abs+dep").output == inspect("--scheme", "noabs+dep").output
    assert "\t-1\t-2" in inspect("--scheme", "abs+dep").output
    old = inspect("--scheme", "path")
    assert old.exit_code == 0 and old.output.endswith(inspect("--scheme", "abs+gps").output)
    assert "path is deprecated; use abs+gps" in old.output
    both = inspect("--scheme", "abs+dep+rel")
    assert both.exit_code == 2 and "has dep, rel" in both.output


def test_report_names_each_runs_scheme_as_train_takes_it(tmp_path):
    import json
    import shutil

    from depnmt.evaluation.report import training_summary
    published = REPO / "docs" / "results" / "multi30k-en-de" / "compare-plateau" / "models"
    assert training_summary(published / "dep+rel")["scheme"] == "abs+dep+rel"
    run = tmp_path / "run"
    shutil.copytree(published / "abs", run)
    config = json.loads((run / "config.json").read_text())
    for schemes, name in ((entries(["abs", "dbsa_enc"], {}), "abs+dbsa-enc"),
                          (entries(["dep"], {}), "noabs+dep")):
        config["model"]["schemes"] = schemes
        (run / "config.json").write_text(json.dumps(config))
        assert training_summary(run)["scheme"] == name


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_train_takes_every_name(name, monkeypatch, tmp_path):
    got, err = train_config(monkeypatch, tmp_path, "--scheme", name)
    assert got == entries(*CANONICAL[name]) and "warning" not in err


def test_resuming_a_0_1_0_model_takes_its_options_in_todays_terms_silently(capsys):
    from depnmt.commands.train import command
    from depnmt.training.config import inherit_saved
    folder = REPO / "docs" / "results" / "multi30k-en-de" / "compare-plateau" / "models" / "gps"
    ctx = command.make_context("train", ["-i", "d", "-o", str(folder)])
    params, given = today_terms(inherit_saved(ctx.params, set(), folder), set())
    assert (params["scheme"], params["gps_layer"], given) == ("abs+gps", "1", set())
    assert "gps_layers" not in params and capsys.readouterr().err == ""


def test_reading_a_saved_models_name_imports_no_torch():
    """``report``, ``runs`` and ``archive`` name the schemes of saved models: without torch
    (its import is more than a second of their start-up)."""
    import subprocess
    import sys
    code = ("import sys\nfrom depnmt.evaluation import report, runs, archive\n"
            "from depnmt.core.schemename import scheme_name\n"
            "assert scheme_name([{'name': 'dbsa_enc'}]) == 'noabs+dbsa-enc'\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
