"""``depnmt train``'s GPU paths, run on the CPU: fp16 with loss scaling (CPU autocast in fp16 and
a CPU GradScaler stand in for CUDA's), resuming across precisions, the GPU running out of
memory; DistributedDataParallel in a one-process gloo group."""

from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import depnmt.training.loop
import depnmt.training.step
import depnmt.training.validation
from depnmt.model.transformer import TransformerNMT
from depnmt.storage.checkpoint import load_checkpoint
from depnmt.training import distributed as dist

from .conftest import TINY_MODEL, import_random_trees, run_cli


def cpu_fp16(monkeypatch) -> None:
    """``--precision fp16`` allowed on the CPU (it is refused there: "needs a CUDA GPU")."""
    monkeypatch.setattr(depnmt.training.loop, "train_precision", lambda device, name: torch.float16)


def test_fp32_checkpoint_resumes_in_fp16_with_a_fresh_loss_scale(tiny_bpe, tmp_path, monkeypatch,
                                                                 capsys):
    model = tmp_path / "m"
    train = ["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--valid-every", "0"]
    assert run_cli([*train, "--max-steps", "2", "--precision", "fp32"]) == 0
    assert load_checkpoint(model / "checkpoints" / "last.pt")["scaler"] == {}
    cpu_fp16(monkeypatch)
    capsys.readouterr()
    assert run_cli([*train, "--max-steps", "4", "--resume", "--precision", "fp16"]) == 0
    assert "starting a fresh loss scale (65536)" in capsys.readouterr().err
    saved = load_checkpoint(model / "checkpoints" / "last.pt")
    assert saved["scaler"]["scale"] > 0 and saved["progress"]["step"] == 4
    monkeypatch.undo()                                  # and back: fp16's scale is dropped
    assert run_cli([*train, "--max-steps", "5", "--resume", "--precision", "fp32"]) == 0
    assert load_checkpoint(model / "checkpoints" / "last.pt")["scaler"] == {}


@pytest.mark.parametrize("when", ["train", "valid"])
def test_out_of_memory_is_one_line_naming_what_to_lower(tiny_bpe, tmp_path, monkeypatch, capsys,
                                                        when):
    forward = TransformerNMT.forward

    def forward_or_oom(self, *args, **kwargs):
        if torch.is_grad_enabled() == (when == "train"):    # validation runs without grad
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(TransformerNMT, "forward", forward_or_oom)
    capsys.readouterr()
    status = run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL,
                      "--max-steps", "2", "--valid-every", "1", "--update-freq", "2"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert err.rstrip().endswith(line)
    if when == "train":
        assert line == ("error: out of memory on cpu in update 1 (--max-tokens 400, "
                        "--update-freq 2): halve --max-tokens and double --update-freq to keep "
                        "the same update size")
    else:
        assert line.startswith("error: out of memory on cpu while validating after update 1 ")
        assert "--max-tokens 400" in line and "--valid-beam" in line


def test_a_model_too_large_to_build_is_one_line_naming_its_sizes(tiny_bpe, tmp_path,
                                                                 monkeypatch, capsys):
    """The CPU allocator's error while the model is built (as `--d-model 1000000` gives:
    "can't allocate memory: you tried to allocate 4000000000000 bytes") is one line."""
    def too_large(self, *args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                           "can't allocate memory: you tried to allocate 4000000000000 bytes.")

    monkeypatch.setattr(TransformerNMT, "__init__", too_large)
    capsys.readouterr()
    status = run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL,
                      "--max-steps", "1"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert line.startswith("error: out of memory on cpu building the model (d_model 32, d_ff 64, "
                           "1+1 layers, vocabularies ")
    assert line.endswith("lower --d-model, --d-ff or --layers")


def test_out_of_memory_while_translating_is_one_line_naming_what_to_lower(tiny_model,
                                                                         monkeypatch, capsys):
    """The search running out of device memory is one line naming the batch and the flags."""
    from depnmt.decoding.translate import Translator

    def search_oom(self, *args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(Translator, "_search", search_oom)
    monkeypatch.setattr("sys.stdin", io.StringIO("ein Hund läuft .\n"))
    capsys.readouterr()
    status = run_cli(["translate", "-m", tiny_model, "--beam", "3", "--max-tokens", "500"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert line == ("error: out of memory on cpu searching a batch of 1 sentences (--beam 3, "
                    "--max-tokens 500, --batch-size unlimited): lower --max-tokens or --beam")


# -- one update, piece by piece ----------------------------------------------------------------

def make_trainer(tiny_bpe, model_dir, schemes=("abs",), trees=None, **opts):
    """A Trainer of a 1-layer model on the tiny corpus (CPU, fp32 unless patched)."""
    from depnmt.decoding.search import SearchConfig
    from depnmt.model.schemes.registry import scheme_entries
    from depnmt.model.transformer import ModelConfig
    from depnmt.training.config import TrainingRun, TrainOptions
    from depnmt.training.loop import Trainer
    from depnmt.training.setup import prepare_run
    cfg = ModelConfig(0, 0, d_model=32, n_heads=2, d_ff=64, encoder_layers=1, decoder_layers=1,
                      schemes=scheme_entries(list(schemes), {}))
    options = TrainOptions(**{"max_tokens": 400, "warmup": 10, "lr": 3e-3, "device": "cpu",
                              "precision": "fp32", **opts})
    return Trainer(prepare_run(TrainingRun(tiny_bpe, model_dir, cfg, options, SearchConfig(),
                                           trees_dir=trees)))


def first_update(trainer):
    return next(iter(trainer._updates()))[1]


def test_fp16_update_with_inf_gradients_is_skipped_and_not_counted(tiny_bpe, tmp_path,
                                                                   monkeypatch):
    """The loss scaler skips an update whose gradients overflowed: then neither the schedule
    nor the step count may advance (else the LR runs ahead of the updates really made)."""
    cpu_fp16(monkeypatch)
    trainer = make_trainer(tiny_bpe, tmp_path / "m", update_freq=2)
    assert trainer.updater.scaler.is_enabled() and trainer.amp is torch.float16
    batches = first_update(trainer)
    weight = next(trainer.model.parameters())
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    hook = weight.register_hook(lambda g: torch.full_like(g, float("inf")))
    stats = trainer.train_step(batches)
    hook.remove()
    assert trainer.progress.step == 0 and trainer.updater.scheduler.last_epoch == 0
    assert stats["stepped"] is False and trainer.updater.scaler.get_scale() == 2.0 ** 15
    assert all(torch.equal(v, before[k]) for k, v in trainer.model.state_dict().items())
    stats = trainer.train_step(batches)
    assert stats["stepped"] is True and trainer.progress.step == 1
    assert trainer.updater.scheduler.last_epoch == 1
    assert not all(torch.equal(v, before[k]) for k, v in trainer.model.state_dict().items())


SYNCS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__")


def count_device_reads(monkeypatch) -> list[tuple[str, int]]:
    """From now on, each read of a tensor's value on the host (``item``, ``float(t)``,
    ``tolist``, ...: each waits for the GPU) made by the training loop's own code (its update,
    validation, data.py) is appended to the returned list as (method, line)."""
    import sys
    ours = {depnmt.training.loop.__file__, depnmt.training.step.__file__,
            depnmt.training.validation.__file__, sys.modules["depnmt.data.batches"].__file__}
    calls: list[tuple[str, int]] = []

    def counting(name):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            caller = sys._getframe(1)
            if caller.f_code.co_filename in ours:
                calls.append((name, caller.f_lineno))
            return original(self, *args, **kwargs)
        return wrapper

    for name in SYNCS:
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    return calls


def test_an_update_reads_the_device_once(tiny_bpe, tmp_path, monkeypatch):
    """However many batches an update accumulates, the loop reads the device once."""
    trainer = make_trainer(tiny_bpe, tmp_path / "m", update_freq=3)
    batches = first_update(trainer)
    calls = count_device_reads(monkeypatch)
    stats = trainer.train_step(batches)
    monkeypatch.undo()
    assert len(calls) == 1, calls
    assert stats["stepped"] and stats["tokens"] == sum(b.n_tokens for b in batches)


def test_validation_reads_the_device_once(tiny_bpe, tmp_path, monkeypatch):
    """The dev loss and token accuracy are read once, after the last dev batch (BLEU's
    decoding and the schemes' dev metrics are not the loop's code)."""
    trainer = make_trainer(tiny_bpe, tmp_path / "m", max_tokens=200)
    trainer.run.dev_refs = []                   # no BLEU
    calls = count_device_reads(monkeypatch)
    result = trainer.validator.validate()
    monkeypatch.undo()
    assert len(calls) == 1, calls
    assert 0 < result["dev_nll"] < 20 and 0 <= result["dev_acc"] <= 100


@pytest.fixture
def gloo_group(tmp_path):
    """A gloo process group of one process (rank 0 of 1): the distributed code paths run."""
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def test_an_update_is_one_all_reduce(tiny_bpe, tmp_path, gloo_group, monkeypatch):
    trainer = make_trainer(tiny_bpe, tmp_path / "m", update_freq=2)
    assert isinstance(trainer.net, torch.nn.parallel.DistributedDataParallel)
    batches = first_update(trainer)
    reduced = []
    all_reduce = torch.distributed.all_reduce
    monkeypatch.setattr(torch.distributed, "all_reduce",
                        lambda t, *a, **k: reduced.append(t.shape) or all_reduce(t, *a, **k))
    stats = trainer.train_step(batches)
    assert reduced == [torch.Size([4])]         # target, source tokens, loss, nll
    assert stats["tokens"] == sum(b.n_tokens for b in batches)


class OldDDP(nn.parallel.DistributedDataParallel):
    """DistributedDataParallel as torch before 2.13 declares it: no ``forward_sync_buffers``."""

    def __init__(self, module, device_ids=None, broadcast_buffers=True):
        with warnings.catch_warnings():     # this torch calls broadcast_buffers deprecated
            warnings.simplefilter("ignore", FutureWarning)
            super().__init__(module, device_ids=device_ids, broadcast_buffers=broadcast_buffers)


def test_wrap_keeps_buffers_local_with_and_without_forward_sync_buffers(gloo_group, monkeypatch):
    model = nn.Linear(2, 2)
    net = dist.wrap(model, torch.device("cpu"))        # this torch's DDP
    assert isinstance(net, nn.parallel.DistributedDataParallel) and net.module is model
    assert net.broadcast_buffers is False
    monkeypatch.setattr(nn.parallel, "DistributedDataParallel", OldDDP)
    old = dist.wrap(model, torch.device("cpu"))
    assert type(old) is OldDDP and old.broadcast_buffers is False
    assert dist.no_buffer_sync(OldDDP) == {"broadcast_buffers": False}


def test_no_process_keeps_the_corpus_or_its_features(tiny_bpe, tmp_path_factory, tmp_path,
                                                    monkeypatch):
    """Training holds the corpus as a cache reader (offsets and lengths, no examples), and
    every batch gets its tree features when it is collated: in the training process
    (``--workers 0``) or a worker, in one process or as rank 0 of 2, the same."""
    from depnmt.data.cache import TrainCorpus
    trees = import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given-lazy"), "parse-lazy",
                                ("en",), ["nsubj", "obj"], seed=4)
    one = make_trainer(tiny_bpe, tmp_path / "one", ("deplabel", "rel"), trees, workers=0)
    assert isinstance(one.run.train_data, TrainCorpus)
    assert not vars(one.run.train_data).keys() - {"src", "tgt", "keep", "source_digests"}
    workers = make_trainer(tiny_bpe, tmp_path / "workers", ("deplabel", "rel"), trees, workers=2)
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    two = make_trainer(tiny_bpe, tmp_path / "two", ("deplabel", "rel"), trees, workers=0)
    (a,), (b,), (c,) = first_update(one), first_update(workers), first_update(two)
    assert a.ids == b.ids == c.ids and a.src_feats.keys() == b.src_feats.keys() != set()
    assert all(torch.equal(a.src_feats[k], b.src_feats[k]) and torch.equal(a.src_feats[k],
                                                                            c.src_feats[k])
               for k in a.src_feats)


CPU_OOM = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
           "memory: you tried to allocate 40000000000 bytes. Error code 12")


def test_the_cpu_running_out_of_memory_in_training_is_one_line(tiny_bpe, tmp_path, monkeypatch,
                                                               capsys):
    def oom(self, *args, **kwargs):
        raise RuntimeError(CPU_OOM)

    monkeypatch.setattr(TransformerNMT, "forward", oom)
    capsys.readouterr()
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL,
                    "--max-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [x for x in err.splitlines() if x.startswith("error:")] == [
        "error: out of memory on cpu in update 1 (--max-tokens 400, --update-freq 1): halve "
        "--max-tokens and double --update-freq to keep the same update size"]


def test_other_runtime_errors_are_not_taken_for_out_of_memory(tiny_bpe, tmp_path, monkeypatch):
    def broken(self, *args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(TransformerNMT, "forward", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL, "--max-steps", "2"])


def test_the_cpu_running_out_of_memory_in_translate_is_one_line(tiny_model, tmp_path,
                                                                monkeypatch, capsys):
    import depnmt.decoding.translate as translate

    def oom(*args, **kwargs):
        raise RuntimeError(CPU_OOM)

    monkeypatch.setattr(translate, "search", oom)
    source = tmp_path / "in.txt"
    source.write_text("a dog runs .\n", encoding="utf-8")
    capsys.readouterr()
    assert run_cli(["translate", "-m", tiny_model, "-i", source, "-o", tmp_path / "out",
                    "--beam", "2"]) == 2
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert line.startswith("error: out of memory on cpu searching a batch of 1 sentences "
                           "(--beam 2, --max-tokens 8000")
    assert line.endswith("lower --max-tokens or --beam") and not (tmp_path / "out").exists()
