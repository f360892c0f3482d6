"""depnmt.training.distributed's collectives in two gloo processes under ``torchrun``: objects of
different sizes gathered in rank order, and every collective's tensors still referenced by the
module afterwards, so that a gloo worker thread never frees a Python tensor while the process
group is being destroyed (with torch before 2.8 that could hang a finished run at exit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from test_ddp import free_port  # tests/unit is on sys.path (it has no __init__.py)

SCRIPT = textwrap.dedent('''
    import json, sys
    from depnmt.training import distributed as dist
    with dist.process_group("cpu"):
        r = dist.rank()
        objects = dist.gather_objects({"rank": r, "text": "x" * (1000 * r + 1)})
        total = dist.all_reduce_sum([1.0, float(r)])
        flag = dist.broadcast_flag(r == 0)
        most = dist.max_over_ranks(10 * r + 3)
        kept = [len(tensors) for tensors in dist._kept]
    with open(f"{sys.argv[1]}/rank{r}.json", "w") as fh:
        json.dump({"objects": objects, "total": total, "flag": flag, "most": most,
                   "kept": kept}, fh)
''')


def test_two_gloo_processes_gather_reduce_and_keep_their_tensors(tmp_path):
    script = tmp_path / "collectives.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                             "2", "--master_addr", "127.0.0.1", "--master_port",
                             str(free_port()), str(script), str(tmp_path)],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    for r in (0, 1):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert got["objects"] == [{"rank": 0, "text": "x"}, {"rank": 1, "text": "x" * 1001}]
        assert got["total"] == [2.0, 1.0] and got["flag"] is True and got["most"] == 13
        # gather: sizes and bytes (1 input + 2 outputs each); all_reduce; broadcast; max
        assert got["kept"] == [3, 3, 1, 1, 1]
