"""depnmt.training.distributed in a single process (every helper a no-op), the sharding rule, and
the
premise of ``find_unused_parameters=False``: every scheme gives every parameter a gradient."""

from __future__ import annotations

import pytest
import torch
from test_bench import load_bench  # tests/unit is on sys.path (it has no __init__.py)

from depnmt.core.errors import DepnmtError
from depnmt.data.batches import shard_updates
from depnmt.model.transformer import label_smoothed_nll
from depnmt.training import distributed as dist


def updates(n: int, freq: int, start: int = 0, world: int = 1) -> list[list[tuple[int, list[int]]]]:
    """Each rank's ``shard_updates``."""
    return [list(shard_updates(n, freq, start, r, world)) for r in range(world)]


def test_world_of_two_sees_the_batches_of_one_process_with_double_update_freq():
    (one,) = updates(11, 4)
    two = updates(11, 2, world=2)
    assert [done for done, _ in one] == [done for done, _ in two[0]] == [4, 8]
    for (_, both), (_, r0), (_, r1) in zip(one, *two):
        assert sorted(r0 + r1) == both and r0 == both[0::2] and r1 == both[1::2]


def test_sharding_drops_the_incomplete_last_group_and_resumes_mid_epoch():
    assert updates(7, 1, world=3) == [[(3, [0]), (6, [3])], [(3, [1]), (6, [4])],
                                      [(3, [2]), (6, [5])]]
    assert updates(9, 2, start=4, world=2) == [[(8, [4, 6])], [(8, [5, 7])]]
    assert updates(3, 2, world=2) == [[], []]


def test_helpers_are_no_ops_in_one_process():
    assert (dist.rank(), dist.world_size(), dist.is_main()) == (0, 1, True)
    assert dist.all_reduce_sum(2.5) == 2.5 and dist.all_reduce_sum((1, 2)) == [1, 2]
    t = torch.ones(2)
    assert dist.all_reduce_sum(t) is t
    assert dist.broadcast_flag(False) is False and dist.gather_objects("x") == ["x"]
    model = torch.nn.Linear(2, 2)
    assert dist.wrap(model, torch.device("cpu")) is model
    with dist.sync_gradients(model, now=False), dist.process_group("cpu"):
        dist.barrier()
    state = torch.get_rng_state()
    dist.seed_rank(1)
    assert torch.equal(torch.get_rng_state(), state)        # rank 0 keeps its stream


def test_torchrun_with_one_process_trains_through_ddp(monkeypatch):
    """``torchrun --nproc_per_node 1`` (how one GPU proves the DDP path) forms a group of one and
    wraps the model; a plain process, even with WORLD_SIZE=1 set, does not."""
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not dist.launched()
    for name, value in {"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "LOCAL_RANK": "0",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(name, value)
    assert dist.launched()
    model = torch.nn.Linear(2, 2)
    with dist.process_group("cpu"):
        assert dist.world_size() == 1 and torch.distributed.is_initialized()
        assert isinstance(dist.wrap(model, torch.device("cpu")),
                          torch.nn.parallel.DistributedDataParallel)
    assert not torch.distributed.is_initialized()


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_explicit_gpu_under_torchrun_is_an_error(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(DepnmtError, match="LOCAL_RANK"):
        dist.local_device("cuda:1")
    assert dist.local_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("name", list(load_bench().SYSTEMS))
def test_every_parameter_gets_a_gradient(name):
    """DDP runs with find_unused_parameters=False: a parameter without a gradient would make
    the second update fail."""
    bench = load_bench()
    setup = bench.Setup(torch.device("cpu"), d_model=16, heads=2, d_ff=16, layers=2, vocab=30,
                        src_len=9, tgt_len=8, batch_size=3, n_batches=1, decode_len=2)
    examples = bench.make_examples(setup)
    model = setup.model(name, examples)
    batch = bench.make_batches(setup, examples)[0]
    logits, extras = model(batch.src, batch.tgt_in, batch.src_feats, batch.tgt_feats)
    loss, _ = label_smoothed_nll(logits, batch.tgt_out, 0.1)
    for aux in extras.losses.values():
        loss = loss + aux.weight * aux.value
    loss.backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []
