"""The command line refusing bad input: a bad flag, policy, file or output costs one clear line and a
non-zero exit (2, before anything runs; 1 when a user's policy breaks the run), never a traceback; an
output file that can be written is accepted.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from cli_runs import FAST_FLAGS, assert_one_error_line, read_json, run_cli, specsched


@pytest.fixture
def policy_files(tmp_path):
    (tmp_path / "empty.py").write_text("X = 1\n")
    (tmp_path / "named_boom.py").write_text(textwrap.dedent("""
        from specsched.policies import Policy

        class Boom(Policy):
            name = "boom"

            def pick(self, ready):
                raise RuntimeError("the scheduler exploded")
    """))
    (tmp_path / "exploding.py").write_text(textwrap.dedent("""
        from specsched.policies import Policy

        class Exploding(Policy):
            def pick(self, ready):
                raise ZeroDivisionError("no more picks")
    """))
    return tmp_path


@pytest.mark.parametrize("flags, fragments", [
    (["--policy", "lotto"], ["unknown policy 'lotto'"]),
    (["--policy", "{tmp}/missing.py:Lottery"], ["policy file not found", "missing.py"]),
    (["--policy", "{tmp}/empty.py:Lottery"], ["'Lottery' not found", "empty.py"]),
    (["--policy", "no_such_module_xyz:Lottery"], ["no_such_module_xyz"]),
    (["--k", "0"], ["--k must be in 1..64, got 0"]),
    (["--workers", "0"], ["--workers must be at least 1, got 0"]),
    (["--workers", "-1"], ["--workers must be at least 1"]),
    (["--mode", "turbo"], ["unknown --mode 'turbo'"]),
    (["--backend", "gpu"], ["unknown --backend 'gpu'"]),
    (["--temperature", "-1"], ["--temperature"]),
    (["--workers", "3", "--policy", "priority", "--priorities", "1,2"], ["--priorities"]),
    (["--workers", "3", "--prompt", "a", "--prompt", "b"], ["2 prompts but --workers 3"]),
    (["--backend", "hf", "--sim-agreement", "0.5"], ["applies to --backend sim only", "--backend hf"]),
    (["--lookup", "1"], ["--lookup must be 0 (off) or at least 2"]),
    (["--min-confidence", "1.5"], ["--min-confidence must be in [0, 1)"]),
    (["--mode", "ar", "--lockstep"], ["--lockstep needs draft workers", "--mode ar"]),
    (["--seed", "-1"], ["--seed must be in 0..4,611,686,018,427,387,904, got -1"]),
    (["--temperature", "nan"], ["--temperature must be a finite number"]),
    (["--prompt", " "], ["a --prompt is empty"]),
    (["--json", "{tmp}/no/such/folder/run.json"], ["--json", "does not exist"]),
    (["--json", "{tmp}"], ["--json", "is a folder"]),
    (["--trace", "{tmp}/sub/"], ["--trace", "is a folder"]),
    (["--json", "/dev/full"], ["--json /dev/full is not writable"]),  # it failed after the whole run
    (["--workers", "abc"], ["--workers: invalid int value: 'abc'", "--help"]),
    (["--k-config", "2,,1"], ["--k-config", "'2,,1'"]),
    (["--sim-draft-ms", "-1"], ["--sim-draft-ms must be in [0, 60,000] ms, got -1.0"]),
    (["--sim-verify-ms", "nan"], ["--sim-verify-ms must be in [0, 60,000] ms, got nan"]),
    (["--sim-verify-ms", "1e9"], ["--sim-verify-ms must be in [0, 60,000] ms"]),
    (["--target", "tiny"], ["--target applies to --backend hf or llamacpp"]),
    (["--dtype", "bf16"], ["--dtype applies to --backend hf or llamacpp"]),
    (["--verifier-threads", "-1"], ["--verifier-threads must be in 0..1,024"]),
    (["--prompt", "x", "--task", "creative"], ["--prompt and --task are two workloads"]),
    (["--prompt", "x", "--thoughts", "2"], ["--thoughts applies to a Tree-of-Thoughts run"]),
    (["--prompt", "x", "--breadth", "2"], ["--breadth applies to a Tree-of-Thoughts run"]),
    (["--prompt", "x", "--limit", "2"], ["--limit applies to a Tree-of-Thoughts run"]),
    (["--pct-depth", "4"], ["--pct-depth applies to --tree pct (this run uses --tree fixed)"]),
    (["--join-timeout", "5"], ["--join-timeout applies to --remote-workers N"]),
    (["--target", ""], ["--target is empty"]),  # it meant the default pair, in silence
    (["--seed", str(2**64)], ["--seed must be in 0..4,611,686,018,427,387,904"]),  # it was a msgpack traceback
    (["--verifier-threads", "100000"], ["--verifier-threads must be in 0..1,024"]),  # torch hung
    (["--listen", "tcp://127.0.0.1:5555", "--keys", "k"], ["--listen takes HOST:PORT", "no scheme"]),
    (["--task", "gsm8k", "--thoughts", "2", "--workers", "5"], ["--thoughts 2 and --workers 5 disagree"]),
    (["--task", "gsm8k", "--thoughts", "0"], ["--thoughts must be at least 1, got 0"]),
    (["--max-new-tokens", "99999999999999999999"], ["--max-new-tokens must be in 1..1,000,000"]),
    (["--k", "65"], ["--k must be in 1..64, got 65"]),
    (["--k-config", "64,64,64"], ["--k-config 64,64,64 drafts 266304 tokens a round; at most 1024"]),
    (["--sim-vocab", "100000000000"], ["--sim-vocab must be in 4..262,144"]),
    (["--workers", "65"], ["the job needs 65 draft workers (--mode seed); this engine runs at most 64"]),
    (["--task", "gsm8k", "--thoughts", "65"], ["the job needs 65 draft workers"]),
    (["--raw-prompt"], ["--raw-prompt applies to --backend hf or llamacpp"]),
    (["--json", ""], ["--json is empty; give a file name"]),
    (["--remote-workers", "1", "--join-timeout", "nan"], ["--join-timeout must be > 0 seconds, got nan"]),
    (["--jobs", "3"], ["--jobs applies to --arrivals"]),
    (["--arrivals", "poisson:1", "--jobs", "100000000"], ["--jobs must be in 1..10,000"]),
], ids=lambda x: " ".join(x) if isinstance(x, list) and x and x[0].startswith("--") else None)
def test_bad_input_gets_one_clear_line_and_exit_2(policy_files, flags, fragments):
    flags = [f.format(tmp=policy_files) for f in flags]
    result = run_cli("--max-new-tokens", "4", *FAST_FLAGS, *flags)  # the last value of a flag wins
    assert_one_error_line(result, 2, *fragments)
    assert result.stdout == ""  # refused before anything ran


@pytest.mark.parametrize("backend", ["sim", "hf"])
def test_a_prompt_that_is_not_utf8_is_one_line_naming_the_flag(backend):
    """`--prompt "$(printf 'ab\\xffcd')"`: Python's argv holds byte 0xff as U+DCFF. It was a UnicodeEncodeError
    traceback on sim and a TypeError on hf."""
    result = run_cli("--backend", backend, "--prompt", "ab\udcffcd", "--max-new-tokens", "4")
    assert_one_error_line(result, 2, "a --prompt is not UTF-8 text (byte 0xff at character 3)")
    assert result.stdout == ""


@pytest.mark.parametrize("damage", ["truncated", "random bytes"])
def test_a_damaged_target_weights_file_is_one_line_before_any_process(tmp_path, damage):
    """It was `draft-0 died more than 3 times`, after some 20 s of workers loading the model and dying."""
    import random
    import shutil

    from specsched.runtime.models.registry import resolve_target

    target = shutil.copytree(resolve_target("tiny"), tmp_path / "target")
    weights = target / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[: len(whole) // 2] if damage == "truncated" else random.Random(0).randbytes(len(whole)))
    result = run_cli("--backend", "hf", "--target", str(target), "--draft", "tiny", "--max-new-tokens", "2",
                     timeout=60)
    assert_one_error_line(result, 2, f"--target: {weights} is damaged")
    assert result.stdout == ""


def test_a_policy_that_raises_stops_the_run_with_one_line_naming_it(policy_files):
    result = run_cli("--policy", f"{policy_files}/named_boom.py:Boom", "--workers", "2",
                     "--max-new-tokens", "8", *FAST_FLAGS)
    assert_one_error_line(result, 1, "'boom'", "the scheduler exploded")


def test_a_policy_without_a_name_attribute_is_named_by_its_class_or_spec(policy_files):
    result = run_cli("--policy", f"{policy_files}/exploding.py:Exploding", "--workers", "2",
                     "--max-new-tokens", "8", *FAST_FLAGS)
    line = assert_one_error_line(result, 1, "no more picks")
    assert "Exploding" in line


def test_export_refuses_to_overwrite_its_trace_or_draw_an_absurd_width(tmp_path):
    trace = tmp_path / "run.trace.json"
    run_ok = run_cli("--max-new-tokens", "4", *FAST_FLAGS, "--trace", str(trace))
    assert run_ok.returncode == 0, run_ok.stderr
    before = trace.read_bytes()
    same = specsched("export", str(trace), "--svg", str(trace))
    assert_one_error_line(same, 2, "would overwrite the trace it reads")
    wide = specsched("export", str(trace), "--svg", str(tmp_path / "o.svg"), "--width", "100000000")
    assert_one_error_line(wide, 2, "--width must be in")
    assert trace.read_bytes() == before and not (tmp_path / "o.svg").exists()
    fine = specsched("export", str(trace), "--svg", str(tmp_path / "o.svg"))
    assert fine.returncode == 0 and (tmp_path / "o.svg").read_text().startswith("<svg")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A recorded run's trace, and a copy of it without its config (one run for every case below)."""
    folder = tmp_path_factory.mktemp("recorded")
    trace, damaged = folder / "run.trace.json", folder / "damaged.json"
    assert run_cli("--max-new-tokens", "4", *FAST_FLAGS, "--trace", str(trace)).returncode == 0
    data = read_json(trace)
    del data["config"]
    damaged.write_text(json.dumps(data))
    return {"trace": trace, "damaged": damaged}


@pytest.mark.parametrize("command, fragments", [
    (["export", "{trace}", "--reliability", "{tmp}/afile/r.svg"], ["--reliability", "folder", "does not exist"]),
    (["export", "{trace}", "--chrome", ""], ["--chrome is empty"]),
    (["export", "{damaged}", "--svg", "{tmp}/o.svg"], ["damaged.json: not a specsched record", "'config'"]),
    (["replay", "{damaged}", "--final"], ["damaged.json: not a specsched record", "'config'"]),
    (["whatif", "{damaged}", "--policy", "fcfs"], ["damaged.json: not a specsched record", "'config'"]),
    (["whatif", "{trace}", "--policy", "fcfs", "--svg", "{tmp}/afile"], ["--svg", "is a file; give a folder"]),
    (["replay", "{tmp}/missing.json"], ["cannot read", "missing.json: No such file or directory"]),
    (["replay", "{several}"], ["several.json is a compare, bench, workload or tree record"]),
], ids=lambda x: " ".join(x[:1] + x[2:]) if isinstance(x, list) and x[0] in ("export", "replay", "whatif") else None)
def test_watching_a_run_refuses_bad_files_and_outputs_in_one_line(recorded, tmp_path, command, fragments):
    (tmp_path / "afile").write_text("")
    (tmp_path / "several.json").write_text(json.dumps({"policies": {}}))  # compare --json's shape
    paths = {**recorded, "tmp": tmp_path, "several": tmp_path / "several.json"}
    result = specsched(*(a.format(**paths) for a in command))
    assert_one_error_line(result, 2, *fragments)


def test_compare_checks_its_chart_folder_before_running_any_policy(tmp_path):
    (tmp_path / "afile").write_text("")
    result = specsched("compare", "--backend", "sim", "--prompt", "a b", "--max-new-tokens", "2",
                        "--policies", "fcfs,rr", "--svg", str(tmp_path / "afile" / "charts"))
    assert_one_error_line(result, 2, "--svg", "cannot create this folder")
    assert "running policy" not in result.stdout


def test_an_existing_writable_output_file_is_accepted_in_a_folder_the_user_cannot_write(tmp_path, monkeypatch):
    """Like --json /dev/null for a normal user: the file is writable, its folder is not."""
    import argparse
    from pathlib import Path

    import specsched.runtime.apps.run.output_paths as outputs

    target = tmp_path / "run.json"
    target.write_text("")
    monkeypatch.setattr(outputs.os, "access", lambda path, mode: Path(path) == target)
    outputs.check_outputs(argparse.Namespace(json=str(target)))  # no error
    with pytest.raises(outputs.ConfigError, match="is not writable"):
        outputs.check_outputs(argparse.Namespace(json=str(tmp_path / "new.json")))


def test_an_output_never_overwrites_an_input_or_another_output(tmp_path):
    """The record used to replace the workload, data or policy file it was given, and one of two outputs
    naming one file was lost; /proc passed the writability check (root may write anywhere else)."""
    import argparse

    from specsched.runtime.apps.run.output_paths import check_outputs
    from specsched.runtime.core.config import ConfigError

    workload, policy = tmp_path / "jobs.jsonl", tmp_path / "mine.py"
    workload.write_text('{"prompt": "a"}\n')
    policy.write_text("")
    cases = [(dict(workload=str(workload), json=str(workload)), "would overwrite the file --workload reads"),
             (dict(data=str(workload), trace=str(workload)), "would overwrite the file --data reads"),
             (dict(policy=f"{policy}:Mine", json=str(policy)), "would overwrite the file --policy reads"),
             (dict(policies=["fcfs", f"{policy}:Mine"], json=str(policy)), "would overwrite the file --policy"),
             (dict(json=str(tmp_path / "r"), trace=str(tmp_path / "r")), "name the same file"),
             (dict(json="/proc/specsched-test.json"), "is not writable")]
    for given, message in cases:
        with pytest.raises(ConfigError, match=message):
            check_outputs(argparse.Namespace(**given))
    check_outputs(argparse.Namespace(json="/dev/null", trace="/dev/null"))  # loses nothing
    keys = tmp_path / "keys"
    keys.mkdir()
    with pytest.raises(ConfigError, match="would overwrite the file --keys reads"):
        check_outputs(argparse.Namespace(keys=str(keys), json=str(keys / "engine.key")))
    (tmp_path / "link").symlink_to(tmp_path / "nowhere.json")  # a dangling link: the write makes its target
    check_outputs(argparse.Namespace(json=str(tmp_path / "link")))
    check_outputs(argparse.Namespace(json=str(tmp_path / "new.json")))
    assert workload.read_text() == '{"prompt": "a"}\n' and not (tmp_path / "new.json").exists()
