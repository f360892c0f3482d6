"""``depnmt controls``: a parse folder of control trees made from a parse folder.

Inputs: ``PARSE/{split}.{lang}.conllu`` and ``PARSE/manifest.json`` (a ``depnmt parse``
folder of the parser's trees). Outputs: ``OUT/{split}.{lang}.conllu``, one control tree
(:mod:`depnmt.stages.parse.controls`) per tree of the input, over exactly its words, and
``OUT/manifest.json`` of stage ``parse``, so that ``multitask`` and ``train -t`` read
the folder as they read a parser's. The manifest is the input's, plus:

* ``control``: the control (``kind``, ``seed``, ``labels``, ``noise``), the ``sides`` it was
  applied to, and the ``source`` folder with the SHA-256 of each of its files and of them all;
* ``parser``: for each controlled side, the parser settings with the control added under
  ``control``. ``train`` copies a side's settings into the model folder, and the parser that
  ``translate`` makes from them (:func:`depnmt.stages.parse.make_parser`) applies the same control
  to the trees it parses.

The folder is written all or nothing (:func:`~depnmt.core.stagedir.stage_output`); it may not be the
input folder, lie inside it or contain it, nor replace a folder of the parser's own trees.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from depnmt.core.conllu import read_conllu, write_conllu
from depnmt.core.errors import DepnmtError
from depnmt.core.log import info
from depnmt.core.manifest import MANIFEST, load_manifest, write_manifest
from depnmt.core.stagedir import check_distinct, stage_output
from depnmt.core.textio import read_json
from depnmt.data.record import sha256
from depnmt.stages.parse.controls import Control
from depnmt.stages.parse.stage import SIDES, TREE_FILE, side_langs

CONTROL = "control"


def check_folders(parse_dir: Path, out_dir: Path) -> None:
    """Refuse an output folder that is the input folder, lies inside it or contains it, or
    holds a parser's trees (a parse folder that is no control folder)."""
    check_distinct(out_dir, {"input parse folder": parse_dir})
    old = out_dir / MANIFEST
    if old.is_file():
        manifest = read_json(old, "")
        if manifest.get("stage") == "parse" and CONTROL not in manifest:
            raise DepnmtError(f"{out_dir}: holds a parser's trees (`depnmt parse` output), which "
                              f"a control folder would replace; choose another output folder")


def check_parser_trees(path: Path | None, control: Control | None) -> None:
    """Trees given to a model trained on control trees (``translate --input-format conllu``,
    ``rescore --src-format conllu``) must be the parser's: the model applies its ``control``
    to every tree it is given. A file of a control folder (its manifest records a control and
    lists the file) would be controlled twice, which for ``shuffled`` and ``noise`` gives
    other trees than the folder holds for the same sentences: a :class:`DepnmtError` naming
    the parser's file it was made from. Nothing to check without a control or a file."""
    if control is None or path is None or not (Path(path).parent / MANIFEST).is_file():
        return
    manifest = read_json(Path(path).parent / MANIFEST, "")
    made = manifest.get(CONTROL)
    if not isinstance(made, dict) or Path(path).name not in (manifest.get("outputs") or {}):
        return
    source = Path(str((made.get("source") or {}).get("folder"))) / Path(path).name
    raise DepnmtError(f"{path}: control trees (`depnmt controls`), but the model applies its "
                      f"control ({control.describe()}) to the trees it is given, so they would "
                      f"be controlled twice: give the parser's trees, {source}")


def source_record(parse_dir: Path, manifest: dict) -> dict:
    """The input folder and the SHA-256 of each file its manifest lists (and of the manifest),
    with one SHA-256 of them all (of the lines ``NAME SHA256``, sorted by name)."""
    names = sorted([*manifest["outputs"], MANIFEST])
    files = {name: sha256(parse_dir / name) for name in names}
    joined = "".join(f"{name} {digest}\n" for name, digest in files.items())
    return {"folder": str(parse_dir.resolve()),
            "sha256": hashlib.sha256(joined.encode("utf-8")).hexdigest(), "files": files}


def tree_files(parse_dir: Path, manifest: dict, sides: list[str] | None) -> dict[str, str]:
    """The tree files of the input folder, each with its side (``src``/``tgt``); the sides
    asked for (None: every side the folder has) must be in the folder."""
    try:
        prepare = load_manifest(Path(manifest["prepare_dir"]), "prepare", verify=False)
    except DepnmtError as exc:
        raise DepnmtError(f"{parse_dir}: its prepare folder names each file's language and "
                          f"side, but: {exc}") from None
    by_lang = {lang: side for side, lang in side_langs(prepare).items()}
    files = {name: by_lang.get(name.split(".")[1], "") for name in manifest["outputs"]
             if TREE_FILE.match(name)}
    have = [s for s in SIDES if s in files.values()]
    missing = [s for s in sides or () if s not in have]
    if missing:
        raise DepnmtError(f"{parse_dir}: has no {missing[0]}-side trees (it has: "
                          f"{', '.join(have) or 'none'})")
    return files


def run_controls(parse_dir: Path, out_dir: Path, control: Control,
                 sides: list[str] | None = None) -> dict:
    """Write the control folder ``out_dir`` of ``parse_dir`` (module docstring); ``sides``:
    the sides to control (None: every side the folder has; the others are copied as they
    are). Returns the new manifest."""
    check_folders(parse_dir, out_dir)
    manifest = load_manifest(parse_dir, "parse")
    if CONTROL in manifest:
        raise DepnmtError(f"{parse_dir}: holds control trees already "
                          f"({Control.from_dict(manifest[CONTROL]['settings']).describe()}); "
                          f"make controls from a folder of the parser's trees")
    files = tree_files(parse_dir, manifest, sides)
    chosen = sides or [s for s in SIDES if s in files.values()]
    record = source_record(parse_dir, manifest)
    with stage_output(out_dir, "parse", command="controls") as tmp:
        for name, side in sorted(files.items()):
            trees = read_conllu(parse_dir / name)
            if side in chosen:
                trees = (control.apply(tree) for tree in trees)
            n = write_conllu(tmp / name, trees)
            what = f"{control.describe()} control trees" if side in chosen else "trees copied"
            info(f"{out_dir / name}: {n} {what}")
        parser = dict(manifest.get("parser") or {})
        for side in chosen:
            parser[side] = {**parser[side], CONTROL: control.to_dict()}
        extra = {key: manifest.get(key) for key in ("parser_models", "parser_versions",
                                                   "prepare_dir", "sides")}
        return write_manifest(
            tmp, "parse", inputs={"parse": record["folder"], "files": sorted(files)},
            options={**(manifest.get("options") or {}), CONTROL: control.to_dict()},
            outputs=sorted(files),
            extra={**extra, "parser": parser,
                   CONTROL: {"settings": control.to_dict(), "sides": chosen, "source": record}})
