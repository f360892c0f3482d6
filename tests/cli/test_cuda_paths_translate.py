"""What the tests and `translate` do where a GPU is present: the fixtures stay on the CPU (exact
outputs hold only there), `translate --max-tokens/--batch-size` bound the batches (the tiny
model's fp32 translations stay the same), `translate --help` says what is deterministic, and
the search runs inside :func:`depnmt.core.device.search_attention` (no cuDNN attention on a GPU)."""

from __future__ import annotations

import contextlib

import click
import pytest
import torch

import depnmt
import depnmt.decoding.translate
from depnmt.cli import cli

from .conftest import CPU, TINY_MODEL, on_cpu, run_cli, takes_device


def device_commands() -> list[list[str]]:
    """The path of every (sub)command with a ``--device`` option."""
    ctx = click.Context(cli)
    paths = []
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        subs = command.commands.items() if isinstance(command, click.Group) else [(None, command)]
        paths += [[name] + ([sub] if sub else []) for sub, c in subs
                  if any("--device" in p.opts for p in c.params)]
    return paths


def test_every_command_with_a_device_runs_on_the_cpu_in_the_tests():
    paths = device_commands()
    assert ["train"] in paths and ["translate"] in paths
    for path in paths:
        assert takes_device(path)
        assert on_cpu([*path, "-m", "x"]) == [*path, "-m", "x", *CPU]
        assert on_cpu([*path, "--device", "cuda:1"]) == [*path, "--device", "cuda:1"]
        assert on_cpu([*path, "--device=cuda"]) == [*path, "--device=cuda"]
    assert on_cpu(["score", "x"]) == ["score", "x"]           # no --device: nothing added
    assert TINY_MODEL[-2:] == CPU


@pytest.fixture
def cuda_forbidden(monkeypatch):
    """CUDA reported available, and any use of it (the first CUDA tensor initialises CUDA) an
    error: what a fixture would meet on a GPU machine if it did not pin the CPU."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a test fixture tried to use CUDA")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "_lazy_init", forbidden)


def test_fixture_train_and_translate_never_touch_cuda(tiny_bpe, tmp_path, cuda_forbidden):
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--max-steps", "2",
                    "--valid-every", "0"]) == 0
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps",
                    "3"]) == 0
    src = tmp_path / "in.txt"
    src.write_text("A man rides a bike.\nTwo dogs play.\n", encoding="utf-8")
    assert run_cli(["translate", "-m", model, "-i", src]) == 0


def translate_recording_batches(args: list, capsys, monkeypatch) -> tuple[str, list[tuple]]:
    """stdout of ``depnmt translate ARGS`` (in-process) and the ``(sentences, longest, beam)``
    of every batch it searched."""
    import depnmt.decoding.translate
    seen = []
    search = depnmt.decoding.translate.search

    def recording(model, src, src_feats, cfg, extras=None):
        seen.append((*src.shape, cfg.beam))
        return search(model, src, src_feats, cfg, extras)
    monkeypatch.setattr(depnmt.decoding.translate, "search", recording)
    capsys.readouterr()
    assert run_cli(["translate", *args, "--precision", "fp32"]) == 0
    return capsys.readouterr().out, seen


@pytest.mark.slow
def test_max_tokens_and_batch_size_bound_batches_not_output(tiny_model, tiny_bpe, capsys,
                                                            monkeypatch):
    src = tiny_bpe.parent / "prepare" / "test.raw.en"
    common = ["-m", tiny_model, "-i", src, "--beam", "3"]
    reference, _ = translate_recording_batches([*common, "--batch-size", "1"], capsys,
                                               monkeypatch)               # one at a time
    assert len(reference.splitlines()) == 30
    for flags, most_tokens, most_sentences in (([], 8000, 30),
                                               (["--max-tokens", "1"], 1, 30),
                                               (["--max-tokens", "100"], 100, 30),
                                               (["--max-tokens", "100000"], 100000, 30),
                                               (["--batch-size", "4"], 8000, 4),
                                               (["--batch-size", "0"], 8000, 30)):
        out, batches = translate_recording_batches([*common, *flags], capsys, monkeypatch)
        assert out == reference, flags
        assert sum(n for n, _, _ in batches) == 30
        assert all(n <= most_sentences for n, _, _ in batches), (flags, batches)
        assert all(n == 1 or n * longest * beam <= most_tokens
                   for n, longest, beam in batches), (flags, batches)
    assert len(translate_recording_batches([*common, "--max-tokens", "1"], capsys,
                                           monkeypatch)[1]) == 30


@pytest.mark.parametrize("flag, value", [("--max-tokens", "0"), ("--max-tokens", "x"),
                                         ("--batch-size", "-1")])
def test_bad_batching_values_are_one_line_usage_errors(flag, value, capsys):
    assert run_cli(["translate", "-m", "nowhere", flag, value]) == 2
    err = capsys.readouterr().err
    assert f"Invalid value for '{flag}'" in err and "Traceback" not in err


def test_translator_api_takes_and_checks_the_batching(tiny_model):
    from depnmt.core.errors import DepnmtError
    from depnmt.decoding.translate import MAX_TOKENS, Translator
    tr = Translator.from_model_dir(tiny_model, device="cpu", precision="fp32", max_tokens=7,
                                   batch_size=2)
    assert (tr.max_tokens, tr.batch_size) == (7, 2)
    assert Translator.from_model_dir(tiny_model, device="cpu").max_tokens == MAX_TOKENS
    for bad in (dict(max_tokens=0), dict(batch_size=-1)):
        with pytest.raises(DepnmtError, match="max_tokens 0|batch_size -1"):
            Translator.from_model_dir(tiny_model, device="cpu", **bad)


def test_translate_help_shows_the_batching_defaults():
    from depnmt.commands.translate import command
    from depnmt.decoding.translate import MAX_TOKENS, MAX_TOKENS_GPU
    defaults = {p.name: p.default for p in command.params}
    assert defaults["max_tokens"] is None and defaults["batch_size"] == 0
    help_text = " ".join(command.get_help(click.Context(command, **command.context_settings))
                         .split())
    assert f"[default: ({MAX_TOKENS} on the CPU and with --ct2, {MAX_TOKENS_GPU} on a GPU); " \
           "x>=1]" in help_text


def test_the_default_batch_bound_depends_on_the_device():
    from depnmt.decoding.translate import MAX_TOKENS, MAX_TOKENS_GPU, default_max_tokens
    assert (MAX_TOKENS, MAX_TOKENS_GPU) == (8000, 32000)
    assert default_max_tokens(torch.device("cuda")) == MAX_TOKENS_GPU
    assert default_max_tokens(torch.device("cuda", 1)) == MAX_TOKENS_GPU
    assert default_max_tokens(torch.device("cpu")) == MAX_TOKENS


def test_translate_without_max_tokens_takes_the_default_of_its_device(tiny_model, monkeypatch):
    """The default is resolved from the device the model was put on (``--device auto``
    included); a given --max-tokens wins on every device."""
    seen = []

    def recording(device):
        seen.append(device)
        return 12345
    monkeypatch.setattr(depnmt.decoding.translate, "default_max_tokens", recording)
    tr = depnmt.decoding.translate.Translator.from_model_dir(tiny_model, device="cpu")
    assert tr.max_tokens == 12345 and seen == [torch.device("cpu")]
    assert depnmt.Translator.load(tiny_model, device="cpu")._translator.max_tokens == 12345
    assert depnmt.decoding.translate.Translator.from_model_dir(tiny_model, device="cpu",
                                                      max_tokens=99).max_tokens == 99
    assert len(seen) == 2


def test_ct2_translate_takes_the_same_batching(tiny_model, tiny_bpe, tmp_path, capsys):
    pytest.importorskip("ctranslate2", reason="CTranslate2 is an optional extra")
    exported = tmp_path / "ct2"
    assert run_cli(["export", "--format", "ctranslate2", "-m", tiny_model, "-o", exported]) == 0
    src = tiny_bpe.parent / "prepare" / "test.raw.en"
    outputs = []
    for flags in ([], ["--max-tokens", "1"], ["--batch-size", "3"]):
        capsys.readouterr()
        assert run_cli(["translate", "--ct2", exported, "-i", src, *flags]) == 0
        outputs.append(capsys.readouterr().out)
    assert len(outputs[0].splitlines()) == 30 and outputs[1:] == outputs[:1] * 2
    from depnmt.decoding.ct2translate import CT2Translator
    assert CT2Translator.from_dir(exported, batch_size=3).batch_size == 3


def test_translate_help_promises_exact_output_only_where_it_holds():
    """fp32 repeats itself on one CPU (same torch, threads, batching), not across machines or
    on CUDA."""
    from depnmt.commands.translate import command
    precision = " ".join(next(p for p in command.params if p.name == "precision").help.split())
    assert "on every machine" not in precision
    assert "fp32 on the CPU repeats its output exactly on one machine with the same torch " \
           "version, threads and batching" in precision
    assert "on CUDA two runs can also differ" in precision


def test_the_search_runs_inside_search_attention(tiny_model, monkeypatch):
    devices, inside = [], []

    @contextlib.contextmanager
    def recorder(device):
        devices.append(device)
        inside.append(True)
        yield
        inside.pop()

    def searched(real):
        def spy(*args, **kwargs):
            assert inside, "searched outside search_attention"
            return real(*args, **kwargs)
        return spy

    monkeypatch.setattr(depnmt.decoding.translate, "search_attention", recorder)
    for name in ("search", "search_nbest"):
        monkeypatch.setattr(depnmt.decoding.translate, name, searched(getattr(depnmt.decoding.translate, name)))
    translator = depnmt.Translator.load(tiny_model, device="cpu")
    assert len(translator.translate(["A man rides a bike.", "Two dogs play."])) == 2
    assert len(translator.translate(["Two dogs play."], nbest=2)[0]) == 2
    assert devices and {d.type for d in devices} == {"cpu"} and not inside
