"""The installed package is this checkout, whole, and wins over a folder named like it (docs/install.md).

`pip install -e .` builds a link tree (pyproject.toml's [tool.distutils.editable_wheel]): a regular package on
sys.path, which Python's path finder prefers to a folder named `specsched` in the working directory, such as the
checkout itself seen from its parent folder. The link tree is made at install time, so a module added since is
missing from it until `pip install -e .` runs again: the second test names such modules.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runs import REPO

REINSTALL = f"run `{Path(sys.executable).parent / 'pip'} install -e {REPO}` again"


def _from(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=folder, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_the_installed_package_wins_over_a_folder_named_specsched_in_the_working_directory(tmp_path):
    # the checkout's parent folder, as a user who cloned into ./specsched stands in it: the folder has the
    # checkout's shape (no __init__.py at its top), so Python's path finder would take it for a namespace package
    (tmp_path / "specsched").symlink_to(REPO, target_is_directory=True)
    api = _from(tmp_path, "-c", "from specsched import Engine, RunConfig; print(Engine.__name__, RunConfig().policy)")
    assert api.returncode == 0 and api.stdout.split() == ["Engine", "fcfs"], f"{api.stderr}\n{REINSTALL}"
    command = _from(tmp_path, "-m", "specsched", "--help")
    assert command.returncode == 0 and command.stdout.startswith("usage: specsched"), f"{command.stderr}\n{REINSTALL}"


def _modules() -> dict[str, Path]:
    """Every module of the package, by its installed name, from pyproject.toml's package-dir mapping."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: REPO / folder for name, folder in setuptools["package-dir"].items()}
    modules = {}
    for package in setuptools["packages"]:
        # a package's folder: its own mapping, else its parent's folder and its last name
        parent, _, last = package.rpartition(".")
        folder = folders.get(package) or folders[parent] / last
        folders[package] = folder
        for path in sorted(folder.glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
    return modules


def test_every_module_of_the_checkout_is_the_one_python_imports():
    stale = []
    for name, path in _modules().items():
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or Path(spec.origin).resolve() != path.resolve():
            stale.append(f"{name} ({'missing' if spec is None else spec.origin})")
    assert not stale, f"the installed package is not this checkout's: {', '.join(stale[:5])}; {REINSTALL}"
