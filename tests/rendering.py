"""Rich renderables as the plain text a user's terminal shows."""

from __future__ import annotations

import io

from rich.console import Console


def render_text(renderable, width: int = 160) -> str:
    """A Rich renderable as plain text at a fixed width (no colour), as a user's terminal shows it."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()
