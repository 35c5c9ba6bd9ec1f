"""Whether a model directory's weights files are whole, read from their headers alone (no tensor, no torch): a
damaged copy is one line before any process starts, not a worker that dies each time it loads the model."""

from __future__ import annotations

from pathlib import Path

from safetensors import SafetensorError, safe_open


def damaged_weights(model: Path) -> str | None:
    """Why a ``*.safetensors`` file in `model` cannot be loaded, or None. A file is an 8-byte header length, the
    header (JSON: each tensor's byte range) and the bytes; the header must parse and its ranges cover the rest
    of the file exactly, which a truncated copy's or random bytes' do not."""
    for weights in sorted(model.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="numpy"):
                pass
        except (SafetensorError, OSError) as exc:
            return f"{weights} is damaged ({exc})"
    return None
