"""Rows of a `--data` file, checked field by field so a bad one is reported by its line, not a traceback."""

from __future__ import annotations


class RowError(ValueError):
    """A row `Task.load` cannot use; `index` is its position in the rows it was given (0-based), so the
    file reader can turn it into a line number."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(f"row {index + 1}: {message}")
        self.index = index
        self.message = message


def text_field(row: dict, index: int, key: str) -> str:
    """`row[key]`, which must be a non-empty string."""
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        got = "nothing" if value is None else repr(value)[:40]
        raise RowError(index, f'"{key}" must be a non-empty string, got {got}')
    return value


def row_id(row: dict, index: int, task: str) -> str:
    """The row's own "id" when it has one, else the task name and its 1-based position."""
    given = row.get("id")
    return str(given) if given not in (None, "") else f"{task}-{index + 1}"
