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
FEATURE_CONFIG = "feature_config.json"          # a feature draft (feature_draft.py)
FEATURE_WEIGHTS = "feature_draft.safetensors"


def is_distilled_draft(path: Path) -> bool:
    """A draft saved by `save_draft` (needs `load_draft`), as opposed to a plain transformers model."""
    return (Path(path) / CONFIG_FILE).is_file() and (Path(path) / WEIGHTS_FILE).is_file()


def is_feature_draft(path: Path) -> bool:
    """A draft that reads the target's features (`save_feature_draft`)."""
    return (Path(path) / FEATURE_CONFIG).is_file() and (Path(path) / FEATURE_WEIGHTS).is_file()


def distilled_vocab(path: Path) -> int:
    """The full vocabulary a distilled (or feature) draft's logits span: its target's."""
    config = CONFIG_FILE if is_distilled_draft(path) else FEATURE_CONFIG
    return int(json.loads((Path(path) / config).read_text())["target_vocab"])
