"""Every command's options are declared once, as the fields of its settings dataclass
(:func:`depnmt.core.optionspec.option`): the field gives the command's flag, its help and default,
its value checks on the command line and in the Python API, and its place in what the stage
records. Adding an option to ``prepare``, as a subclass with one more field, is all it takes
to see it as a flag, an API keyword and a manifest entry."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import depnmt.commands.prepare as prepare_command
import depnmt.stages.prepare
from depnmt.commands.fields import click_option
from depnmt.core.errors import DepnmtError
from depnmt.core.optionspec import (COUNT, Choice, File, Param, check_options, field_param, option,
                                    option_fields)
from depnmt.decoding.settings import DecodingSettings
from depnmt.stages.prepare import Settings, Sources
from depnmt.stages.tokenize import make_tokenizer


@dataclass
class WithTrim(Settings):
    """prepare's settings and one more: what adding an option is."""

    trim: int = option(0, "cut each side to its first N tokens (0 = off)", COUNT, metavar="N",
                       show_default=True)


@pytest.fixture
def trim(monkeypatch):
    """``--trim`` declared as one more field of prepare's settings; the command rebuilt with
    it, and rebuilt as it was afterwards."""
    monkeypatch.setattr(depnmt.stages.prepare, "Settings", WithTrim)
    yield importlib.reload(prepare_command)
    monkeypatch.undo()
    importlib.reload(prepare_command)


def corpus(tmp_path: Path) -> list[str]:
    """Own en/de files of four pairs; the arguments that prepare them (one pair each held out
    for dev and test)."""
    for lang, words in (("en", "a dog runs"), ("de", "ein Hund rennt")):
        (tmp_path / f"train.{lang}").write_text("".join(f"{words} {i}\n" for i in range(4)))
    return ["--src-lang", "en", "--tgt-lang", "de", "--train-src", str(tmp_path / "train.en"),
            "--train-tgt", str(tmp_path / "train.de"), "--tokenizer-src", "keep",
            "--tokenizer-tgt", "keep", "--dev-size", "1", "--test-size", "1"]


def options_recorded(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))["options"]


def test_every_prepare_option_is_a_field():
    names = [f.name for cls in (Settings, Sources) for f in option_fields(cls)]
    params = [p.name for p in prepare_command.command.params
              if not p.hidden and p.name != "config_file"]          # --config: their values
    assert sorted(params) == sorted(names) and len(names) == 22


def test_a_new_prepare_field_is_a_flag_with_its_help_and_check(trim, tmp_path):
    runner = CliRunner()
    text = " ".join(runner.invoke(trim.command, ["--help"]).output.split())
    assert "--trim N cut each side to its first N tokens (0 = off) [default: 0; x>=0]" in text
    result = runner.invoke(trim.command, [*corpus(tmp_path), "--trim", "-1", "-o", "out"])
    assert result.exit_code == 2 and "Invalid value for '--trim'" in result.output
    out = tmp_path / "out"
    result = runner.invoke(trim.command, [*corpus(tmp_path), "--trim", "3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert options_recorded(out)["trim"] == 3                      # the manifest's options
    config = tmp_path / "prepare.yaml"                             # and a --config key
    config.write_text("trim: 4\n", encoding="utf-8")
    result = runner.invoke(trim.command, [*corpus(tmp_path), "--config", str(config), "-o",
                                          str(tmp_path / "from-config")])
    assert result.exit_code == 0, result.output
    assert options_recorded(tmp_path / "from-config")["trim"] == 4
    config.write_text("trim: -1\n", encoding="utf-8")
    result = runner.invoke(trim.command, [*corpus(tmp_path), "--config", str(config), "-o",
                                          str(tmp_path / "bad-config")])
    assert result.exit_code == 2 and "trim in" in result.output and "-1" in result.output


def test_a_new_prepare_field_is_a_keyword_of_the_api(trim, tmp_path):
    with pytest.raises(DepnmtError, match="trim -2: -2 is not in the range x>=0"):
        WithTrim(src_lang="en", tgt_lang="de", trim=-2)
    corpus(tmp_path)
    files = {"train": (tmp_path / "train.en", tmp_path / "train.de")}
    tokenizers = tuple(make_tokenizer({"kind": "keep", "lang": lang}) for lang in ("en", "de"))
    settings = WithTrim(src_lang="en", tgt_lang="de", dev_size=1, test_size=1, trim=5)
    depnmt.stages.prepare.prepare(tmp_path / "api", files, settings, tokenizers)
    assert options_recorded(tmp_path / "api")["trim"] == 5


@pytest.mark.parametrize("settings, message", [
    (lambda: Settings("en", "de", min_len=-1), "min_len -1: -1 is not in the range x>=0"),
    (lambda: Settings("en", "de", langid_filter="all"), "langid_filter 'all': 'all' is not one"),
    (lambda: Settings("en", "de", corpus="nope"), "corpus 'nope': 'nope' is not one of"),
    (lambda: Sources(train_src=Path("no-such-file")), "train_src .*: File 'no-such-file' does "
                                                      "not exist"),
    (lambda: Sources(jobs=0), "jobs 0: 0 is not a number of processes"),
])
def test_the_api_checks_a_setting_as_the_flag_does(settings, message):
    with pytest.raises(DepnmtError, match=message):
        settings()


# -- the declarations themselves ---------------------------------------------------------------
@dataclass
class Kinds:
    """One field of each kind a declaration can give."""

    out: Path | None = option(None, "where", File(), flag=("-o", "--output"), required=True)
    names: tuple = option((), "repeatable", str, multiple=True, metavar="NAME")
    pair: tuple | None = option(None, "two values", (str, File(text=True)), nargs=2)
    mode: str = option("a", "a or b", Choice("ab"), show_default="a, else b", hidden=True)


def test_a_field_gives_every_part_of_its_flag():
    params = {p.name: p for p in (field_param(f) for f in option_fields(Kinds))}
    assert params["out"].flags == ("-o", "--output") and params["out"].required
    options = {name: click_option(p) for name, p in params.items()}
    assert options["names"].multiple and options["names"].metavar == "NAME"
    assert options["pair"].nargs == 2 and isinstance(options["pair"].type, click.Tuple)
    assert options["mode"].hidden and options["mode"].show_default == "a, else b"
    assert Param("x", ("--x",)).multiple is False


def test_a_field_of_several_values_is_checked_value_by_value(tmp_path):
    check_options(Kinds(names=("a", "b"), pair=("x", str(tmp_path / "f"))))
    with pytest.raises(DepnmtError, match="is a directory"):
        check_options(Kinds(pair=("x", str(tmp_path))))
    with pytest.raises(TypeError, match="unknown colour"):
        option(0, "a bad declaration", colour="red")


# -- every converted command: its flags are its settings' fields --------------------------------
def converted() -> list[tuple[str, list[type]]]:
    """Command module -> the settings dataclasses its flags come from."""
    from depnmt.decoding.export import ExportSettings
    from depnmt.evaluation.archive import ArchiveSettings
    from depnmt.evaluation.curves import PlotSettings
    from depnmt.evaluation.inspect import InspectSettings
    from depnmt.evaluation.minimalpairs import MinimalPairsSettings
    from depnmt.evaluation.report import ReportSettings
    from depnmt.evaluation.runs import RunsSettings
    from depnmt.evaluation.score import ScoreSettings
    from depnmt.stages.bpe import BpeSettings
    from depnmt.stages.multitask import MultitaskSettings
    from depnmt.stages.parse.controls import ControlSettings
    from depnmt.stages.parse.stage import ParseSettings
    from depnmt.training.average import AverageSettings
    return [("prepare", [Settings, Sources]), ("parse", [ParseSettings]),
            ("controls", [ControlSettings]), ("bpe", [BpeSettings]),
            ("score", [ScoreSettings]), ("report", [ReportSettings]),
            ("average", [AverageSettings]),
            ("export", [ExportSettings]),
            ("minimalpairs", [MinimalPairsSettings]),
            ("inspect", [InspectSettings]),
            ("runs", [RunsSettings]),
            ("archive", [ArchiveSettings]),
            ("plot", [PlotSettings]),
            ("multitask", [MultitaskSettings])]


@pytest.mark.parametrize("name, classes", converted(), ids=lambda x: x if isinstance(x, str)
                         else "")
def test_each_flag_of_a_converted_command_is_one_field(name, classes):
    command = importlib.import_module(f"depnmt.commands.{name}").command
    options = [p.name for p in command.params if isinstance(p, click.Option) and not p.hidden
               and p.name != "config_file"]         # --config FILE: values of the others
    assert options == [f.name for cls in classes for f in option_fields(cls)]


@pytest.mark.parametrize("name, key, value, args", [
    ("prepare", "min-len", 2, ["--src-lang", "en", "--tgt-lang", "de", "--tokenizer-src", "keep",
                               "--tokenizer-tgt", "keep", "--dev-size", "1", "--test-size", "1"]),
    ("bpe", "merges", 7, []),
])
def test_a_stage_takes_its_options_from_a_config_file(name, key, value, args, tmp_path):
    """``prepare``, ``parse`` and ``bpe`` read ``--config FILE`` as ``train`` does: keys as
    the long flags, checked as the flags are, flags on the command line win."""
    runner = CliRunner()
    prepared = tmp_path / "prep"
    files = corpus(tmp_path)[4:8]
    assert runner.invoke(prepare_command.command, [*files, *corpus(tmp_path)[:4],
                         *corpus(tmp_path)[8:], "-o", str(prepared)]).exit_code == 0
    config = tmp_path / f"{name}.yaml"
    config.write_text(f"{key}: {value}\n", encoding="utf-8")
    command = importlib.import_module(f"depnmt.commands.{name}").command
    inputs = files if name == "prepare" else ["-i", str(prepared)]
    out = tmp_path / f"{name}-out"
    result = runner.invoke(command, [*inputs, *args, "--config", str(config), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert options_recorded(out)[key.replace("-", "_")] == value
    config.write_text("no-such-option: 1\n", encoding="utf-8")
    result = runner.invoke(command, [*inputs, *args, "--config", str(config), "-o",
                                     str(tmp_path / "other")])
    assert result.exit_code != 0 and "unknown option 'no-such-option'" in str(result.exception
                                                                              or result.output)
    parse_help = importlib.import_module("depnmt.commands.parse").command
    assert "--config" in runner.invoke(parse_help, ["--help"]).output


def api_settings():
    from depnmt.decoding.export import ExportSettings
    from depnmt.evaluation.analyze import AwslSettings
    from depnmt.evaluation.archive import ArchiveSettings
    from depnmt.evaluation.attachment import UasSettings
    from depnmt.evaluation.contrastive import ContrastiveSettings
    from depnmt.evaluation.curves import PlotSettings
    from depnmt.evaluation.inspect import InspectSettings
    from depnmt.evaluation.minimalpairs import MinimalPairsSettings
    from depnmt.evaluation.report import ReportSettings
    from depnmt.evaluation.runs import RunsSettings
    from depnmt.evaluation.score import ScoreSettings
    from depnmt.stages.bpe import BpeSettings
    from depnmt.stages.multitask import MultitaskSettings
    from depnmt.stages.parse.controls import ControlSettings
    from depnmt.stages.parse.stage import ParseSettings
    from depnmt.training.average import AverageSettings
    return [(lambda: BpeSettings(merges=0), "merges 0: 0 is not in the range x>=1"),
            (lambda: BpeSettings(mode="char"), "mode 'char': 'char' is not one of"),
            (lambda: ParseSettings(shard="3/2"), "shard '3/2': expected i/N with 0 <= i < N"),
            (lambda: ParseSettings(batch_size=0), "batch_size 0: 0 is not in the range x>=1"),
            (lambda: ControlSettings(kind="noise", noise=1.5), r"noise 1.5: 1.5 is not in"),
            (lambda: ScoreSettings(chrf_word_order=10), "chrf_word_order 10: 10 is not in"),
            (lambda: ScoreSettings(bucket_plot=""), "bucket_plot '': an empty path"),
            (lambda: ReportSettings(deltas=("bleu=0.5", "bleu=1")),
             r"bleu given twice \(0.5 and 1\)"),
            (lambda: ReportSettings(deltas=("ter=1",)), "expected MEASURE=VALUE"),
            (lambda: AverageSettings(last=0), "last 0: 0 is not in the range x>=1"),
            (lambda: ExportSettings(quantization="int4"), "quantization 'int4': 'int4' is not"),
            (lambda: MinimalPairsSettings(output_path=Path(".")), "output_path .*is a directory"),
            (lambda: InspectSettings(scheme="abs"), "scheme 'abs': inspect shows one part"),
            (lambda: RunsSettings(as_json="maybe"), "as_json 'maybe': 'maybe' is not a valid"),
            (lambda: ArchiveSettings(check=(Path("no-such-folder"),)), "Directory "
                                                                      "'no-such-folder' does not"),
            (lambda: PlotSettings(models=(Path("."),), output=Path(".")), "is a directory"),
            (lambda: MultitaskSettings(parse_fraction=1.5), "parse_fraction 1.5: 1.5 is not in"),
            (lambda: AwslSettings(max_sentences=-1), "max_sentences -1: -1 is not in the range"),
            (lambda: UasSettings(backend="udpipe"), "backend 'udpipe': 'udpipe' is not one of"),
            (lambda: ContrastiveSettings(fmt="xml"), "fmt 'xml': 'xml' is not one of"),
            (lambda: ContrastiveSettings(max_tokens=0), "max_tokens 0: 0 is not in the range"),
            *decoding_settings()]


def decoding_settings():
    from depnmt.decoding.settings import DecodingSettings, RescoreSettings, TranslateSettings
    from depnmt.stages.parse.stanza_backend import DownloadSettings
    return [(lambda: DecodingSettings(batch_size=-1), "batch_size -1: -1 is not in the range"),
            (lambda: DecodingSettings(precision="fp8"), "precision 'fp8': 'fp8' is not one of"),
            (lambda: DecodingSettings(model_dirs=(Path(__file__),)), "is a file"),
            (lambda: TranslateSettings(quantize="int4"), "'int4': choose one of none, int8"),
            (lambda: TranslateSettings(nbest=0), "nbest 0: 0 is not in the range x>=1"),
            (lambda: TranslateSettings(input_format="json"), "input_format 'json': 'json' is"),
            (lambda: RescoreSettings(max_tokens=0), "max_tokens 0: 0 is not in the range"),
            (lambda: RescoreSettings(tgt_path=Path(".")), "tgt_path .*is a directory"),
            (lambda: DownloadSettings(stanza_dir=__file__), "stanza_dir .*is a file")]


@pytest.mark.parametrize("settings, message", api_settings())
def test_each_command_s_settings_check_their_values_as_the_flags_do(settings, message):
    with pytest.raises(DepnmtError, match=message):
        settings()


def test_options_that_do_not_go_together_are_a_usage_error_of_the_library(tmp_path):
    from depnmt.core.errors import UsageError
    from depnmt.stages.bpe import BpeSettings
    from depnmt.stages.parse.controls import ControlSettings
    from depnmt.stages.parse.stage import ParseSettings
    with pytest.raises(UsageError, match="--min-len 3 is above --max-len 2"):
        Settings("en", "de", min_len=3, max_len=2).check()
    with pytest.raises(UsageError, match="--merge and --shard exclude each other"):
        ParseSettings(merge=True, shard="0/2").check()
    with pytest.raises(UsageError, match="--kind noise needs --noise P"):
        ControlSettings(kind="noise").control()
    with pytest.raises(UsageError, match="--joint/--separate does not go with --subwords-from"):
        BpeSettings(source=tmp_path).check({"joint"})
    assert BpeSettings(mode="word").options().joint is False
    assert ParseSettings(shard="1/4", side="both").options().sides == ["src", "tgt"]


# -- commands whose flags are partly shared, or subcommands ----------------------------------------
def subcommands() -> list[tuple[click.Command, list[type], set[str]]]:
    """Command -> the settings dataclasses of its flags, the flags it shares with translate."""
    from depnmt.commands import analyze, contrastive, forced, models, translate
    from depnmt.core.searchlimits import search_names
    from depnmt.decoding.settings import DecodingSettings, RescoreSettings, TranslateSettings
    from depnmt.evaluation.analyze import AwslSettings
    from depnmt.evaluation.attachment import UasSettings
    from depnmt.evaluation.contrastive import ContrastiveSettings
    from depnmt.stages.parse.stanza_backend import DownloadSettings
    return [(analyze.awsl_command, [AwslSettings], set()),
            (analyze.uas_command, [UasSettings], set()),
            (contrastive.command, [DecodingSettings, ContrastiveSettings], set()),
            (translate.command, [DecodingSettings, TranslateSettings], set(search_names())),
            (forced.command, [DecodingSettings, RescoreSettings], {"alpha", "length_penalty"}),
            (models.download, [DownloadSettings], set())]


@pytest.mark.parametrize("command, classes, shared", subcommands(),
                         ids=lambda x: x.name if isinstance(x, click.Command) else "")
def test_each_own_flag_of_a_command_is_one_field(command, classes, shared):
    options = [p.name for p in command.params if isinstance(p, click.Option) and not p.hidden
               and p.name not in shared]
    assert options == [f.name for cls in classes for f in option_fields(cls)]


def test_a_default_read_when_needed_is_the_api_s_default_too(monkeypatch):
    from depnmt.training.average import AverageSettings
    monkeypatch.setenv("DEPNMT_MODEL", "runs/m1")
    assert AverageSettings().model_dir == Path("runs/m1")
    command = importlib.import_module("depnmt.commands.average").command
    model = next(p for p in command.params if p.name == "model_dir")
    assert callable(model.default)
    assert "(dynamic)" in CliRunner().invoke(command, ["--help"]).output


def test_more_options_that_do_not_go_together_are_errors_of_the_library(tmp_path):
    from depnmt.core.errors import UsageError
    from depnmt.evaluation.analyze import AwslSettings
    from depnmt.evaluation.archive import ArchiveSettings
    from depnmt.evaluation.attachment import UasSettings
    from depnmt.evaluation.contrastive import ContrastiveSettings
    from depnmt.evaluation.curves import PlotSettings
    from depnmt.evaluation.inspect import InspectSettings
    with pytest.raises(UsageError, match="--clip does not apply to gps's root paths"):
        InspectSettings(scheme="abs+gps", clip=2)
    assert InspectSettings(scheme="abs+dep", clip=2).part() == "dep"
    with pytest.raises(UsageError, match="1 --label for 2 --model; give one per model"):
        PlotSettings(models=(tmp_path, tmp_path), labels=("x",))
    with pytest.raises(UsageError, match="give the results FOLDERS to archive"):
        ArchiveSettings(out=Path("out")).check_request([])
    with pytest.raises(DepnmtError, match="--checkpoint applies to one model"):
        AwslSettings(model_dirs=(Path("a"), Path("b")), checkpoint=Path("c.pt"))
    with pytest.raises(DepnmtError, match="nothing to score"):
        UasSettings().check_request([])
    with pytest.raises(DepnmtError, match="--src and --tgt are for --format contrapro"):
        ContrastiveSettings(src_path=Path("s")).set_format(Path("set.tsv"))
    assert ContrastiveSettings(src_path=Path("s")).set_format(Path("set.json")) == "contrapro"
    with pytest.raises(DepnmtError, match="--ensemble scores with several models as one"):
        ContrastiveSettings(ensemble=True).check_scoring([Path("a")])


# -- the options of the commands that decode: one declaration for translate, rescore and
# contrastive, and for Translator.load --------------------------------------------------------
@dataclass
class WithCache(DecodingSettings):
    """The decoding settings and one more: what adding a shared option is."""

    cache_mb: int = option(0, "keep at most N MB of decoder states (0: no limit)", COUNT,
                           metavar="N")


DECODING_COMMANDS = ("translate", "forced", "contrastive")


@pytest.fixture
def cache(monkeypatch):
    """``--cache-mb`` declared as one more field of the shared decoding settings; the three
    commands rebuilt with it (name -> module), and rebuilt as they were afterwards."""
    import depnmt.decoding.settings
    monkeypatch.setattr(depnmt.decoding.settings, "DecodingSettings", WithCache)
    yield {name: importlib.reload(importlib.import_module(f"depnmt.commands.{name}"))
           for name in DECODING_COMMANDS}
    monkeypatch.undo()
    for name in DECODING_COMMANDS:
        importlib.reload(importlib.import_module(f"depnmt.commands.{name}"))


def test_a_new_shared_decoding_field_is_a_flag_of_each_command_that_decodes(cache, tmp_path):
    runner = CliRunner()
    for module in cache.values():
        text = " ".join(runner.invoke(module.command, ["--help"]).output.split())
        assert "--cache-mb N keep at most N MB of decoder states (0: no limit) [default: 0; " \
               "x>=0]" in text, module.__name__
        result = runner.invoke(module.command, ["--cache-mb", "-1"])
        assert result.exit_code == 2 and "Invalid value for '--cache-mb'" in result.output


def test_a_new_shared_decoding_field_reaches_the_loaders(cache, tmp_path, monkeypatch):
    """translate passes it to the translator's loader, rescore to the scorer's."""
    from depnmt.decoding.forced import ForcedScorer
    seen: dict = {}

    def stop(*args, **kwargs):
        seen.update(kwargs)
        raise DepnmtError("stop here")
    monkeypatch.setattr("depnmt.api.load_translator", stop)
    monkeypatch.setattr(ForcedScorer, "from_model_dirs", stop)
    src = tmp_path / "src.txt"
    src.write_text("a\n")
    runner = CliRunner()
    for module, args in ((cache["translate"], []),
                         (cache["forced"], ["--src", str(src), "--tgt", str(src)])):
        seen.clear()
        result = runner.invoke(module.command, ["-m", str(tmp_path), "--cache-mb", "5", *args])
        assert "stop here" in str(result.exception), result.output
        assert seen["cache_mb"] == 5 and seen["device"] == "auto", module.__name__


def test_a_new_shared_decoding_field_is_a_keyword_of_translator_load(cache, tmp_path,
                                                                      monkeypatch):
    from depnmt.api import Translator
    seen: dict = {}
    monkeypatch.setattr("depnmt.api.load_translator",
                        lambda dirs, ckpts, **options: seen.update(options))
    Translator.load(tmp_path, cache_mb=5, beam=2)
    assert seen["cache_mb"] == 5 and seen["beam"] == 2 and seen["quantize"] == "none"
    with pytest.raises(DepnmtError, match="cache_mb -1: -1 is not in the range x>=0"):
        Translator.load(tmp_path, cache_mb=-1)


def test_without_the_field_translator_load_refuses_the_keyword(tmp_path):
    from depnmt.api import Translator
    with pytest.raises(TypeError, match=r"unknown option\(s\) cache_mb of load\(\); expected "
                                        r"batch_size, device, precision, max_tokens, quantize"):
        Translator.load(tmp_path, cache_mb=5)


def test_translate_s_options_that_do_not_go_together_are_errors_of_the_library(monkeypatch):
    from depnmt.decoding.settings import TranslateSettings
    from depnmt.stages.parse.stanza_backend import DownloadSettings
    ct2 = Path("export")
    with pytest.raises(DepnmtError, match="--ct2 translates with one export"):
        TranslateSettings(ct2_dir=ct2).check_ct2(models=2)
    with pytest.raises(DepnmtError, match="--ct2 translates raw text only"):
        TranslateSettings(ct2_dir=ct2, input_format="conllu").check_ct2(models=1)
    with pytest.raises(DepnmtError, match="export with depnmt export --quantization int8"):
        TranslateSettings(ct2_dir=ct2, quantize="int8").check_ct2(models=1)
    TranslateSettings(quantize="int8").check_ct2(models=2)              # no --ct2: nothing
    with pytest.raises(DepnmtError, match="give --input-format conllu"):
        TranslateSettings(dbsa_gold_arcs=True).check_gold_arcs()
    monkeypatch.setenv("STANZA_RESOURCES_DIR", "/data/stanza")
    assert DownloadSettings().folder() == "/data/stanza"
    assert DownloadSettings(stanza_dir="here").folder() == "here"
