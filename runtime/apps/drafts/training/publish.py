"""Writing a trained model's folder so that a reader never sees half of one: written beside, then renamed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path


def atomic_dir(dest: Path, write: Callable[[Path], object]) -> None:
    """Call `write(tmp)`, then replace `dest` (if any) by tmp."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)


def ship(final: Path, dest: Path) -> None:
    """Replace `dest` with a copy of the trained draft in `final`."""
    atomic_dir(dest, lambda tmp: shutil.copytree(final, tmp))
