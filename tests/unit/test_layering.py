"""The package's layering, read from its source with :mod:`ast`: imports go one way (commands →
library → model; no cycle among ``depnmt``'s modules, lazy imports inside functions included),
the model layer knows no command line (neither click nor ``depnmt.commands``), the library
imports no command, no function is longer than :data:`MAX_FUNCTION_LINES` lines and no class
longer than :data:`MAX_CLASS_LINES`."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "depnmt"
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 300
COMMAND_LINE = ("click", "rich_click", "depnmt.commands", "depnmt.cli")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules ``path`` (module ``name``) imports, anywhere in it (lazy imports included):
    for ``from X import y`` the module ``X.y`` where that is one of ``known``, else ``X``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            submodules = {f"{base}.{a.name}" for a in node.names} & known
            out.update(submodules)
            if len(submodules) < len(node.names):       # names defined in ``base`` itself
                out.add(base)
    return {m for m in out if m}


def graph() -> dict[str, set[str]]:
    """Module -> the ``depnmt`` modules it imports (a package's import: its ``__init__``)."""
    found = modules()
    known = set(found)
    return {name: {m for m in imported(path, name, known) if m in known and m != name}
            for name, path in found.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def path_in(component: list[str], edges: dict[str, set[str]]) -> str:
    """One cycle through the component's first module, as ``a -> b -> a``."""
    inside = set(component)
    start = component[0]
    trail, seen = [start], {start}
    while True:
        nxt = sorted(edges[trail[-1]] & inside)
        back = start in nxt
        if back and len(trail) > 1:
            return " -> ".join(trail + [start])
        step = next((m for m in nxt if m not in seen), None)
        if step is None:
            return " -> ".join(trail + ([start] if back else ["..."]))
        trail.append(step)
        seen.add(step)


def test_no_import_cycle_in_the_package():
    edges = graph()
    found = cycles(edges)
    assert not found, "import cycles in depnmt/ (each a set of modules importing one another):\n" \
        + "\n".join(f"  {', '.join(c)}: {path_in(c, edges)}" for c in found)


def test_the_model_layer_knows_no_command_line():
    offending = sorted(
        f"{name} imports {m}" for name, path in modules().items()
        if name.startswith("depnmt.model")
        for m in imported(path, name, set())
        if any(m == c or m.startswith(c + ".") for c in COMMAND_LINE))
    assert not offending, "depnmt/model/ imports the command line:\n  " + "\n  ".join(offending)


def test_only_the_command_layer_imports_the_commands():
    """The library (``depnmt.api`` included) calls the same functions the commands call, never
    a command: only ``depnmt.cli`` and ``depnmt.commands`` import ``depnmt.commands``."""
    offending = sorted(f"{name} imports {m}" for name, deps in graph().items()
                       if not (name == "depnmt.cli" or name.startswith("depnmt.commands"))
                       for m in deps if m == "depnmt.cli" or m.startswith("depnmt.commands"))
    assert not offending, "the library imports the command layer:\n  " + "\n  ".join(offending)


def test_no_function_longer_than_the_limit():
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name} ({path.relative_to(REPO)}:{node.lineno}): "
                                f"{lines} lines")
    assert not long, f"functions longer than {MAX_FUNCTION_LINES} lines:\n  " + "\n  ".join(long)


def test_no_class_longer_than_the_limit():
    """A class a reader can hold: one concern each (a training loop's update, validation,
    checkpoints and log are classes of their own, not one 560-line ``Trainer``)."""
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long.append(f"{name}.{node.name} ({path.relative_to(REPO)}:{node.lineno}): "
                                f"{lines} lines")
    assert not long, f"classes longer than {MAX_CLASS_LINES} lines:\n  " + "\n  ".join(long)


def test_the_cycle_finder_names_the_modules():
    """The checks themselves: a made-up cycle is found and named."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert path_in(["a", "b", "c"], edges) == "a -> b -> c -> a"


# The packages of ``depnmt/`` by concern, lowest first: a module may import its own package and
# the packages before it (``depnmt.version`` from anywhere), never one after it.
LAYERS = ("core", "model", "data", "storage", "stages", "decoding", "training", "evaluation",
          "api", "commands", "cli", "")
ENTRY_POINTS = {"depnmt", "depnmt.api", "depnmt.cli", "depnmt.version", "depnmt.__main__"}


def layer(module: str) -> int:
    """The index in :data:`LAYERS` of a ``depnmt`` module's package (``""``: ``depnmt`` itself)."""
    parts = module.split(".")
    return LAYERS.index(parts[1] if len(parts) > 1 else "")


def test_every_module_is_in_a_package_but_the_entry_points():
    loose = sorted(name for name, path in modules().items()
                   if name.count(".") == 1 and path.name != "__init__.py"
                   and name not in ENTRY_POINTS)
    assert not loose, "modules outside the packages of depnmt/:\n  " + "\n  ".join(loose)
    packages = {name.split(".")[1] for name in modules() if name.count(".") >= 1}
    unplaced = sorted(p for p in packages if p not in LAYERS
                      and f"depnmt.{p}" not in ENTRY_POINTS)
    assert not unplaced, f"packages not in LAYERS: {unplaced}"


def test_packages_import_only_the_layers_below_them():
    """core <- model <- data <- storage <- stages <- decoding <- training <- evaluation <- api
    <- commands <- cli: the model layer sees only the shared types of ``core`` (the dependency
    tree and CoNLL-U sentence included), decoding never imports training, nothing imports
    evaluation but the API and the commands."""
    offending = sorted(f"{name} imports {m}" for name, deps in graph().items()
                       for m in deps if m != "depnmt.version" and layer(m) > layer(name))
    assert not offending, "imports against the package layers (LAYERS):\n  " \
        + "\n  ".join(offending)


def test_the_layer_rule_names_an_import_against_it():
    assert layer("depnmt.core.trees") < layer("depnmt.model.attention") \
        < layer("depnmt.decoding.search") < layer("depnmt.training.loop") < layer("depnmt.cli")
    assert layer("depnmt") == len(LAYERS) - 1
