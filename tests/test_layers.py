"""The layers README's "Repository layout" names import one way: each only from the layers above it.

Every `import specsched...` in the package's source is checked, lazy ones inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (module prefix, layer), most specific first; a module may import from its own layer and those before it
LAYERS = [
    ("specsched.runtime.core", 0),
    ("specsched.runtime.models.training", 7),     # tools on top, used by no process of a run
    ("specsched.runtime.models.evaluation", 7),
    ("specsched.runtime.models.cli", 7),          # `specsched models`: an application
    ("specsched.runtime.models", 1),
    ("specsched.runtime.backends", 2),
    ("specsched.policies", 3),
    ("specsched.workers", 4),
    ("specsched.scheduler", 5),
    ("specsched.runtime.engine", 6),
    ("specsched.runtime", 7),                     # the applications: cli, app, view, tot, bench, ...
    ("specsched", 7),
]
FOLDERS = {"runtime": "specsched.runtime", "workers": "specsched.workers", "scheduler": "specsched.scheduler",
           "policies": "specsched.policies"}


def layer(module: str) -> int:
    return next(n for prefix, n in LAYERS if module == prefix or module.startswith(prefix + "."))


def modules() -> dict[str, Path]:
    out = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            out[".".join((package, *parts)).removesuffix(".__init__")] = path
    return out


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {m for m in found if m == "specsched" or m.startswith("specsched.")}


def test_every_import_points_up_the_layers():
    found = modules()
    assert len(found) > 50  # the walk found the package
    wrong = [f"{name} (layer {layer(name)}) imports {dep} (layer {layer(dep)})"
             for name, path in sorted(found.items()) for dep in sorted(imports(path)) if layer(dep) > layer(name)]
    assert wrong == []
