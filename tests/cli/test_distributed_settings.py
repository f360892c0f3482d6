"""``depnmt train`` with torch.distributed's variables that are wrong, or a rank that never
comes: one ``error:`` line and exit 2 in bounded time (no traceback, no hour-long wait); a run
launched without torchrun, ranks started in any order, joins."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import depnmt
from depnmt.core.errors import DepnmtError

from .conftest import run_cli, run_subprocess
from .test_distributed import free_port

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo is not available")

VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE")
RANK_1_OF_2 = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": "29500"}


def launch_env(monkeypatch, **values: str) -> None:
    """This process's torch.distributed variables: exactly ``values``."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("values, message", [
    ({"WORLD_SIZE": "2"}, "RANK: not set, but WORLD_SIZE is: a run of several processes needs "
                          "RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT"),
    ({"RANK": "1"}, "WORLD_SIZE: not set, but RANK is"),
    ({**RANK_1_OF_2, "MASTER_PORT": "abc"}, "MASTER_PORT: 'abc' is not an integer"),
    ({**RANK_1_OF_2, "MASTER_PORT": "70000"}, "MASTER_PORT: 70000 is out of range (1 to 65535)"),
    ({**RANK_1_OF_2, "RANK": "3"}, "RANK: 3 is out of range (0 to 1, as WORLD_SIZE is 2)"),
    ({**RANK_1_OF_2, "WORLD_SIZE": "two"}, "WORLD_SIZE: 'two' is not an integer"),
    ({**RANK_1_OF_2, "WORLD_SIZE": "0"}, "WORLD_SIZE: 0 is out of range (at least 1)"),
    ({**RANK_1_OF_2, "LOCAL_RANK": "-1"}, "LOCAL_RANK: -1 is out of range (0 to 1"),
    ({**RANK_1_OF_2, "LOCAL_WORLD_SIZE": "1"},
     "LOCAL_RANK: 1 is out of range (0 to 0, as LOCAL_WORLD_SIZE is 1)"),
    ({**RANK_1_OF_2, "LOCAL_WORLD_SIZE": "3"},
     "LOCAL_WORLD_SIZE: 3 is out of range (1 to 2, as WORLD_SIZE is 2)"),
    ({k: v for k, v in RANK_1_OF_2.items() if k != "MASTER_ADDR"}, "MASTER_ADDR: not set"),
    ({**RANK_1_OF_2, "MASTER_ADDR": "no-such-host.invalid"},
     "MASTER_ADDR: cannot resolve 'no-such-host.invalid'"),
    ({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "1"}, "RANK: not set, but WORLD_SIZE is"),
    ({**RANK_1_OF_2, "DEPNMT_RENDEZVOUS_TIMEOUT": "soon"},
     "DEPNMT_RENDEZVOUS_TIMEOUT: 'soon' is not a number of seconds above 0"),
], ids=["world-without-rank", "rank-without-world", "port-abc", "port-70000", "rank-3-of-2",
        "world-two", "world-0", "local-rank-negative", "local-rank-beyond-local-world",
        "local-world-beyond-world", "no-address", "unresolvable-address",
        "torchrun-without-rank", "timeout-soon"])
def test_wrong_settings_are_one_error_naming_the_variable(monkeypatch, capsys, tmp_path,
                                                          values, message):
    launch_env(monkeypatch, **values)
    assert run_cli(["train", "-i", tmp_path / "bpe", "-o", tmp_path / "model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "model").exists()


def test_wrong_settings_are_an_error_of_the_api(monkeypatch, tmp_path):
    launch_env(monkeypatch, WORLD_SIZE="2")
    with pytest.raises(DepnmtError, match="^RANK: not set, but WORLD_SIZE is"):
        depnmt.train_model({"input": str(tmp_path / "bpe"), "output": str(tmp_path / "m"),
                            "device": "cpu"})


@pytest.mark.parametrize("values", [{}, {"WORLD_SIZE": "1"}, {"WORLD_SIZE": "1", "RANK": "0"},
                                    {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "abc"}],
                         ids=["none", "world-1", "rank-0-of-1", "stray-master"])
def test_one_process_settings_train_alone(monkeypatch, values):
    """Without torchrun, a world of one (or stray MASTER_* variables) is a plain process."""
    from depnmt.training import distributed as dist
    launch_env(monkeypatch, **values)
    assert dist.settings() is None and not dist.launched()


@pytest.mark.parametrize("rank, message", [
    (0, "waited 2 s for 2 processes at 127.0.0.1:{port} but only 1 came: start every rank or "
        "check WORLD_SIZE (DEPNMT_RENDEZVOUS_TIMEOUT sets the wait)"),
    (1, "waited 2 s for rank 0 at 127.0.0.1:{port}, which does not answer: start every rank or "
        "check MASTER_ADDR and MASTER_PORT (DEPNMT_RENDEZVOUS_TIMEOUT sets the wait)"),
], ids=["rank-1-missing", "rank-0-missing"])
def test_a_rank_that_never_comes_is_an_error_within_the_timeout(tmp_path, rank, message):
    """WORLD_SIZE=2 but one process: rank 0 (which hosts the store) waits for the other, rank 1
    for rank 0; either gives up after DEPNMT_RENDEZVOUS_TIMEOUT, not the process group's hour."""
    port = free_port()
    env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "LOCAL_WORLD_SIZE": "2",
           "TORCHELASTIC_RUN_ID": "", "DEPNMT_RENDEZVOUS_TIMEOUT": "2", "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    proc = run_subprocess(["train", "-i", tmp_path / "bpe", "-o", tmp_path / "model"],
                          env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr == f"error: {message.format(port=port)}\n"
    assert time.monotonic() - started < 45          # start-up (imports) and the 2 s wait


JOIN = textwrap.dedent("""
    from depnmt.training import distributed as dist
    with dist.process_group("cpu"):
        print(dist.rank(), dist.world_size(), dist.all_reduce_sum(dist.rank() + 1.0))
""")


def test_ranks_started_by_hand_in_any_order_join(tmp_path):
    """Without torchrun rank 0 hosts the store: rank 1, started first, waits for it."""
    port = free_port()
    procs = []
    for rank in (1, 0):
        env = {**{k: v for k, v in os.environ.items() if k not in VARIABLES},
               "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "DEPNMT_RENDEZVOUS_TIMEOUT": "60", "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, "-c", JOIN], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
        time.sleep(1.0)
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sorted(out for out, _ in outputs) == ["0 2 3.0\n", "1 2 3.0\n"]


def test_the_first_rank_to_give_up_stops_the_others():
    """A rank whose wait ends tells the store, and the ranks still waiting there stop at once
    with the count it saw (not each after its own timeout)."""
    from depnmt.training import distributed as dist
    settings = dist.Settings(0, 4, 0, 4, "127.0.0.1", 29500)
    store = torch.distributed.HashStore()
    with pytest.raises(DepnmtError, match="^waited 0.1 s for 4 processes at 127.0.0.1:29500 but "
                                          "only 2 came: start every rank or check WORLD_SIZE"):
        store.add("depnmt/arrived/0", 1)                    # another rank came
        dist.wait_for_all(store, settings, 0.1, time.monotonic() + 0.1, host=False)
    with pytest.raises(DepnmtError, match="^another process stopped waiting for 4 processes at "
                                          "127.0.0.1:29500: only 2 came: start every rank"):
        dist.wait_for_all(store, settings, 60, time.monotonic() + 60, host=False)
