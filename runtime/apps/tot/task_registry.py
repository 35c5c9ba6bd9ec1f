"""The ToT tasks by name, and their problems read from a `--data` JSONL file."""

from __future__ import annotations

import json
from pathlib import Path

from ...core.config import ConfigError
from .blocksworld_task import Blocksworld
from .creative import Creative
from .gsm8k import Gsm8k
from .rows import RowError
from .task import Problem, Task

TASKS: dict[str, type[Task]] = {"gsm8k": Gsm8k, "creative": Creative, "blocksworld": Blocksworld}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; choose one of {', '.join(sorted(TASKS))}")
    return TASKS[name]()


def load_problems(task: Task, path: str | Path) -> list[Problem]:
    """The problems in a JSONL file (one JSON object per line, blank lines skipped), in the row format
    of `task.load`. Any fault is a ConfigError naming the file and, where it has one, the line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"--data {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--data {path}: cannot read it ({e})") from None
    rows, lines = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}:{number}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
        lines.append(number)
    if not rows:
        raise ConfigError(f"{path}: no problems in it (the file is empty)")
    try:
        return task.load(rows)
    except RowError as e:
        raise ConfigError(f"{path}:{lines[e.index]}: {e.message}") from None
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None
