"""0.2.0's module paths (``depnmt.forced``, ``depnmt.parse.conllu``, …) still import, with one
``FutureWarning`` each, as the modules where they live now (:mod:`depnmt.core.moved`)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from depnmt.core.moved import MOVED, new_name


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True,
                          text=True)


def test_an_old_path_is_the_module_where_it_lives_now_with_one_warning():
    done = run("import depnmt.forced as old, depnmt.decoding.forced as new\n"
               "from depnmt.parse.conllu import read_conllu\n"
               "from depnmt.core.conllu import read_conllu as now\n"
               "import depnmt.forced\n"
               "assert old is new and read_conllu is now\n"
               "from depnmt.forced import ForcedScorer\n"
               "assert ForcedScorer is new.ForcedScorer\n")
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "FutureWarning" in line]
    assert warned == [
        "<string>:1: FutureWarning: import path depnmt.forced is deprecated; use "
        "depnmt.decoding.forced (the old spelling goes in 0.3.0)",
        "<string>:2: FutureWarning: import path depnmt.parse is deprecated; use "
        "depnmt.stages.parse (the old spelling goes in 0.3.0)",
        "<string>:2: FutureWarning: import path depnmt.parse.conllu is deprecated; use "
        "depnmt.core.conllu (the old spelling goes in 0.3.0)"]


def test_a_name_that_never_existed_is_still_not_found():
    done = run("import depnmt.nosuchmodule")
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'depnmt.nosuchmodule'" in done.stderr


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_moved_path_leads_to_a_module(old):
    assert importlib.util.find_spec("depnmt." + new_name(old)) is not None


def test_a_package_s_old_prefix_maps_its_modules():
    assert new_name("parse.stage") == "stages.parse.stage"
    assert new_name("parse.conllu") == "core.conllu"
    assert new_name("datacache.corpus") == "data.cache.corpus"
    assert new_name("decoding") is None
