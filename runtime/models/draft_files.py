"""A distilled draft's directory: the two files `save_draft` writes, and what can be read from them without
torch (whether a directory is such a draft, the size of the vocabulary it scores).

Kept apart from draft_model.py so that resolving and checking models (`--target`, `--draft`, `models list`)
costs milliseconds: a wrong path is one line before torch and transformers are imported (~5 s on a CPU).
"""

from __future__ import annotations

import json
from pathlib import Path

CONFIG_FILE = "draft_config.json"
WEIGHTS_FILE = "draft.safetensors"


def is_distilled_draft(path: Path) -> bool:
    """A draft saved by `save_draft` (needs `load_draft`), as opposed to a plain transformers model."""
    return (Path(path) / CONFIG_FILE).is_file() and (Path(path) / WEIGHTS_FILE).is_file()


def distilled_vocab(path: Path) -> int:
    """The full vocabulary a distilled draft's logits span: its target's."""
    return int(json.loads((Path(path) / CONFIG_FILE).read_text())["target_vocab"])
