"""DDP (2 gloo processes on the CPU, ``find_unused_parameters=False``) trains the schemes'
ablations: a parameter that an option combination leaves without a gradient would fail the
second update."""

from __future__ import annotations

import pytest

from .conftest import import_random_trees
from .test_distributed import COMMON, pytestmark, torchrun  # noqa: F401 (pytestmark: gloo)


@pytest.mark.slow
def test_deplabel_rel_key_only_ablation_trains_under_torchrun(tiny_bpe, tmp_path_factory,
                                                              tmp_path):
    trees = import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given-ddp"), "parse-ddp",
                                ("en",), ["nsubj", "obj"], seed=3)
    model = tmp_path / "m"
    proc = torchrun(["train", "-i", tiny_bpe, "--trees", trees, "-o", model, *COMMON,
                     "--scheme", "abs+deplabel+rel", "--rel-terms", "key",
                     "--deplabel-terms", "key"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (model / "checkpoints" / "last.pt").exists()
