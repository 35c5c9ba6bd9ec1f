"""Each folder of the package is one layer, and imports point one way (docs/architecture.md, the layer picture).

Every import of the package's own modules is read from the files, lazy ones inside functions included. The
package's imports are relative, so these arrows are the ones a reader (or a tool) resolves on disk. A module
imports at its top: an import inside a function is for an optional dependency or a measured start-up cost, says
which in a `# lazy:` comment, and there are few of them.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("runtime", "workers", "scheduler", "policies")

# A folder's layer (most specific first): a module imports from its own layer and the layers before it.
LAYERS = [
    ("runtime/core", 0),         # wire, messages, config, sampling, costs: what every process shares
    ("runtime/models", 1),       # model files, caches, the draft models' shapes
    ("runtime/backends", 2),     # a target and a draft behind one interface: sim, hf, llama.cpp
    ("policies", 3),             # the scheduling policies
    ("workers", 4),              # the draft processes
    ("scheduler", 5),            # the verifier process
    ("runtime/engine", 6),       # the process table, supervision, admission of jobs
    ("runtime/apps", 7),         # every command, the view, ToT, bench, draft training: nothing imports them
    ("runtime", 7),
    (".", 7),                    # the package's root (bin/_package/): `specsched.Engine`, the version
]


def layer(folder: str) -> int:
    return next(n for prefix, n in LAYERS if folder == prefix or folder.startswith(prefix + "/"))


def sources() -> list[Path]:
    return [p for f in FOLDERS for p in sorted((ROOT / f).rglob("*.py"))]


def imported_folders(path: Path) -> list[tuple[str, str]]:
    """(folder, what the line says) for each package module `path` imports, resolved on disk."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "specsched" for a in node.names), f"{path}: use a relative import"
        elif isinstance(node, ast.ImportFrom):
            assert node.level or (node.module or "").split(".")[0] != "specsched", f"{path}: use a relative import"
            if not node.level:
                continue
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            target = base.joinpath(*(node.module or "").split(".")) if node.module else base
            for name in node.names:  # `from . import x` names a module of the folder (or the folder's own name)
                sub = target / name.name
                module = sub if (sub.with_suffix(".py").exists() or (sub / "__init__.py").exists()) else target
                folder = module if module.is_dir() else module.parent
                out.append((folder.relative_to(ROOT).as_posix(), ast.unparse(node)))
    return out


def graph() -> dict[str, dict[str, str]]:
    """folder -> {imported folder: one import that makes the arrow}."""
    arrows: dict[str, dict[str, str]] = defaultdict(dict)
    for path in sources():
        here = path.parent.relative_to(ROOT).as_posix()
        for there, line in imported_folders(path):
            if there != here:
                arrows[here].setdefault(there, f"{path.relative_to(ROOT)}: {line}")
    return arrows


def test_every_import_points_down_the_layers():
    arrows = graph()
    assert len(arrows) > 10  # the walk found the folders
    wrong = [f"{why} (layer {layer(a)} imports layer {layer(b)})"
             for a, out in sorted(arrows.items()) for b, why in sorted(out.items()) if layer(b) > layer(a)]
    assert wrong == []


def test_no_folder_imports_itself_through_others():
    arrows, state, path = graph(), {}, []

    def cycle_from(folder: str) -> list[str] | None:
        state[folder] = "open"
        path.append(folder)
        for there in sorted(arrows.get(folder, {})):
            if state.get(there) == "open":
                return path[path.index(there):] + [there]
            if there not in state and (found := cycle_from(there)):
                return found
        state[folder] = "done"
        path.pop()
        return None

    for folder in sorted(arrows):
        if folder not in state and (found := cycle_from(folder)):
            steps = [arrows[a][b] for a, b in zip(found, found[1:])]
            raise AssertionError("a cycle of folders: " + " -> ".join(found) + "\n" + "\n".join(steps))


MAX_LAZY = 20  # imports inside functions, in the whole package


def lazy_imports(path: Path) -> list[int]:
    """The lines of `path`'s imports inside functions: import statements, importlib.import_module and __import__."""
    lines: list[int] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                lines.append(child.lineno)
            elif in_function and isinstance(child, ast.Call):
                f = child.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if name in ("import_module", "__import__"):
                    lines.append(child.lineno)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(path.read_text()), False)
    return lines


def says_why(lines: list[str], n: int) -> bool:
    """Line n (1-based) carries a `# lazy:` comment, or the block of comments right above it starts one."""
    if "# lazy:" in lines[n - 1]:
        return True
    i = n - 2
    while i >= 0 and lines[i].lstrip().startswith("#"):
        if lines[i].lstrip().startswith("# lazy:"):
            return True
        i -= 1
    return False


def test_few_imports_inside_functions_each_saying_why():
    sites = [(path, n) for path in sources() for n in lazy_imports(path)]
    where = [f"{path.relative_to(ROOT)}:{n}" for path, n in sites]
    assert 5 < len(sites) <= MAX_LAZY, where  # the walk finds them; import at the top instead
    silent = [f"{path.relative_to(ROOT)}:{n}" for path, n in sites if not says_why(path.read_text().splitlines(), n)]
    assert silent == []  # say why on the line or above it: `# lazy: optional dependency (...)` or the cost measured


def test_the_lazy_import_count_sees_every_kind(tmp_path):
    """The walk counts what it should: a function's import statements and dynamic imports, not the module's."""
    source = (
        "import os\n"
        "def f():\n"
        "    import json\n"
        "    from . import x\n"
        "    class C:\n"
        "        def g(self):\n"
        "            importlib.import_module('m')\n"
        "    return __import__('y')\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert lazy_imports(path) == [3, 4, 7, 8]
