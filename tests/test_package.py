"""The package builds (sdist, then a wheel from the sdist, as ``python -m build`` does), installs
into a clean virtual environment and runs ``depnmt --help`` there, away from the repository.

Offline: setuptools' PEP 517 hooks run in this environment (no build isolation, nothing
downloaded); the venv sees the packages of the environment the tests run in — the base
interpreter's or an active virtual environment's — through a ``.pth`` file listing its
site-packages folders after the venv's own (``--system-site-packages`` would see the base
interpreter's only), and gets the wheel with ``--no-deps``. Those folders are added as plain
paths, so their own ``.pth`` files (the editable install of the checkout) are not run. The
test checks that the installed ``depnmt`` is the wheel's, not the editable checkout, and that
every file of the package is in the wheel and the sdist.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".git", "work", "build", "dist", "*.egg-info", "__pycache__",
                              ".pytest_cache", "*.pyc")


def package_files() -> set[str]:
    """Every file of the ``depnmt`` package in the checkout (data files included)."""
    return {p.relative_to(REPO).as_posix() for p in (REPO / "depnmt").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def run(cmd: list, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def build(hook: str, source: Path, out: Path) -> Path:
    """Run setuptools' PEP 517 ``hook`` in ``source``; the built file in ``out``."""
    name = run([sys.executable, "-c", f"from setuptools import build_meta as b; "
                                      f"print(b.{hook}({str(out)!r}))"], source).split()[-1]
    return out / name


def site_folders() -> list[str]:
    """The site-packages folders of the environment the tests run in, in import order."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]


def see_this_environment(python: Path) -> None:
    """Make the venv of ``python`` import this environment's packages after its own."""
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  REPO).strip()
    (Path(purelib) / "_tested_environment.pth").write_text("\n".join(site_folders()) + "\n")


@pytest.mark.slow
def test_sdist_and_wheel_install_and_run_in_a_clean_venv(tmp_path):
    source, dist = tmp_path / "src", tmp_path / "dist"
    shutil.copytree(REPO, source, ignore=SKIP)      # builds write egg-info beside the sources
    dist.mkdir()
    sdist = build("build_sdist", source, dist)
    with tarfile.open(sdist) as tar:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp_path / "unpacked", **safe)
        root = next(n for n in tar.getnames() if "/" not in n)
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert package_files() <= in_sdist, package_files() - in_sdist
    assert {"pyproject.toml", "README.md"} <= in_sdist

    wheel = build("build_wheel", tmp_path / "unpacked" / root, dist)   # from the sdist
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    assert package_files() <= in_wheel, package_files() - in_wheel

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    see_this_environment(python)
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", wheel], tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = run([python, "-c", "import depnmt; print(depnmt.__file__)"], outside).strip()
    assert Path(where).is_relative_to(env_dir), where          # the wheel, not the checkout
    help_text = run([env_dir / "bin" / "depnmt", "--help"], outside)
    assert "export" in help_text and "translate" in help_text
    assert "--ct2" in run([env_dir / "bin" / "depnmt", "translate", "--help"], outside)
