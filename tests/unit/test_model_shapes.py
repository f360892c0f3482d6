"""``depnmt/model/shapes.py``: a model's weight names and shapes without drawing its weights."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from test_cuda_paths_model import components, tiny_model  # tests/unit is on sys.path

from depnmt.model.schemes.registry import SCHEMES, load_builtin_schemes
from depnmt.model.shapes import SkipRandomFills, state_shapes

load_builtin_schemes()


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_the_shapes_are_those_of_the_built_model(name, monkeypatch):
    """Every scheme, with the options it learns from data (as ``train`` saves them)."""
    model, _ = tiny_model(monkeypatch, components(name), {})
    assert state_shapes(model.cfg.to_dict()) == {k: v.shape for k, v in
                                                 model.state_dict().items()}


def test_random_fills_are_skipped_and_other_functions_run():
    t = torch.zeros(3)
    with SkipRandomFills():
        torch.nn.init.normal_(t)
        t.uniform_()
        torch.nn.init.kaiming_uniform_(tensor=t.view(1, 3))
        t.add_(1)
    assert t.tolist() == [1.0, 1.0, 1.0]
    torch.nn.init.normal_(t)
    assert t.tolist() != [1.0, 1.0, 1.0]                          # outside: as usual


def test_shapes_do_not_import_the_compiler():
    """Built on the meta device, the model's initialisation imported torch._dynamo (0.8–1.7 s of
    every translate, average and export start-up): not any more."""
    code = ("import sys\n"
            "from depnmt.model.schemes.names import resolve\n"
            "from depnmt.model.schemes.registry import scheme_entries\n"
            "from depnmt.model.shapes import state_shapes\n"
            "from depnmt.model.transformer import ModelConfig\n"
            "for scheme in ('abs', 'abs+dep+rel', 'abs+rel+dbsa-dec'):\n"
            "    entries = scheme_entries(resolve(scheme), {'dbsa_dec_layer': 2})\n"
            "    cfg = ModelConfig(40, 50, d_model=32, n_heads=4, d_ff=64, encoder_layers=2,\n"
            "                      decoder_layers=2, schemes=entries)\n"
            "    state_shapes(cfg.to_dict())\n"
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
