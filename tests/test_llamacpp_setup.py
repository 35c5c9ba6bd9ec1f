"""`--backend llamacpp` set-up errors, checked everywhere (the llamacpp extra need not be installed):
each is one line and exit 2, before any process starts."""

from __future__ import annotations

import os
import random

import pytest
from cli_runs import assert_one_error_line, specsched

from specsched.runtime.models.gguf_target import resolve_gguf


def run_llamacpp(*flags: str, **kwargs):
    return specsched("run", "--backend", "llamacpp", "--prompt", "hi", "--max-new-tokens", "2", "--quiet", *flags,
                     **kwargs)


def test_a_gguf_target_that_is_missing_or_not_a_gguf_costs_one_line(tmp_path):
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"not a gguf at all")
    assert_one_error_line(run_llamacpp("--target", str(tmp_path / "missing.gguf")), 2, "no such GGUF file")
    assert_one_error_line(run_llamacpp("--target", str(not_gguf)), 2, "not a GGUF file")


@pytest.mark.parametrize("damage", ["random bytes", "truncated"])
def test_a_damaged_gguf_target_costs_one_line(tmp_path, damage):
    """GGUF magic and version, then garbage, or a real GGUF cut in half: it was a RuntimeError traceback."""
    pytest.importorskip("llama_cpp", reason="llama.cpp is what reads the GGUF: the llamacpp extra")
    gguf = tmp_path / "x.gguf"
    if damage == "random bytes":
        gguf.write_bytes(b"GGUF\x03\0\0\0" + random.Random(0).randbytes(4096))
    else:
        whole = resolve_gguf("tiny").read_bytes()  # the tiny target as the llamacpp backend runs it
        gguf.write_bytes(whole[: len(whole) // 2])
    assert_one_error_line(run_llamacpp("--target", str(gguf), "--draft", "tiny"), 2, f"--target: llama.cpp cannot "
                          f"read {gguf}")


def test_a_model_llama_cpp_cannot_be_given_costs_one_line(tmp_path):
    model = tmp_path / "gpt"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "gpt2"}')
    assert_one_error_line(run_llamacpp("--target", str(model), "--draft", "tiny"), 2, "exports Llama models only")


def test_without_the_extra_the_backend_says_how_to_install_it(tmp_path):
    hidden = tmp_path / "llama_cpp"
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ImportError('llama_cpp is hidden by this test')\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = run_llamacpp("--target", "tiny", env=env)
    assert_one_error_line(result, 2, "--backend llamacpp needs llama-cpp-python", 'pip install -e ".[llamacpp]"')
