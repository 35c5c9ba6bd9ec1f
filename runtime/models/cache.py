"""Where converted models live: one directory per model id under the user's cache.

`$SPECSCHED_CACHE` wins; otherwise the XDG base-directory spec, `$XDG_CACHE_HOME/specsched`, falling back to
`~/.cache/specsched`. Writers stage into a hidden sibling directory and rename it into place, so a reader
sees either a complete model or none.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SPECSCHED_CACHE"
PARTIAL_PREFIX = ".partial-"


def cache_root() -> Path:
    """The cache directory (not created)."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "specsched"


def model_dir(model_id: str) -> Path:
    """Directory of a cached model; it exists only once the model is complete."""
    return cache_root() / model_id


def is_complete(path: Path) -> bool:
    """A converted transformers directory: config plus weights."""
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def cached_models() -> list[Path]:
    """Complete model directories in the cache, sorted by name; staging leftovers are skipped."""
    root = cache_root()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if not p.name.startswith(".") and is_complete(p))
