"""Where converted models live: one directory per model id under the user's cache.

`$SPECSCHED_CACHE` wins; otherwise the XDG base-directory spec, `$XDG_CACHE_HOME/specsched`, falling back to
`~/.cache/specsched`. Writers stage into a hidden sibling directory and rename it into place, so a reader
sees either a complete model or none.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from ..core.leftovers import owned, remove_dead

ENV_VAR = "SPECSCHED_CACHE"
PARTIAL_PREFIX = ".partial-"
HASHES_FILE = "weight-hashes.json"


def cache_root() -> Path:
    """The cache directory (not created)."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "specsched"


def staging(out: Path) -> Path:
    """A hidden sibling of the file `out`, unique to this process, to write into and then `os.replace` onto
    `out` (atomic in one directory). Two processes that make the same file at once (two first runs of a
    new target) each write their own; the last rename wins, with an equal file, and neither reads half.
    Those of killed processes beside it are removed first (core/leftovers.py)."""
    remove_dead(out.parent, PARTIAL_PREFIX)
    return out.with_name(f"{owned(PARTIAL_PREFIX)}{out.name}.{os.urandom(4).hex()}")


def staging_dir(what: str) -> Path:
    """A new hidden folder in the cache to build `what` in, renamed into place once whole. The folders of
    builds killed before they could remove theirs (`models pull --force` under SIGKILL) are removed first."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    remove_dead(root, PARTIAL_PREFIX)
    return Path(tempfile.mkdtemp(prefix=f"{owned(PARTIAL_PREFIX)}{what}-", dir=root))


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


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def known_sha256(path: Path) -> str:
    """sha256 of a weights file, memoised in the cache by (path, size, mtime): hashing 538 MB costs seconds."""
    stat = path.stat()
    key, stamp = str(path.resolve()), [stat.st_size, stat.st_mtime_ns]
    memo_path = cache_root() / HASHES_FILE
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if isinstance(memo.get(key), dict) and memo[key].get("stamp") == stamp:
        return memo[key]["sha256"]
    memo[key] = {"stamp": stamp, "sha256": sha256_of(path)}
    try:  # a read-only cache only costs the next run another hash
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(memo))
        tmp.replace(memo_path)
    except OSError:
        pass
    return memo[key]["sha256"]
