"""Every record says what produced it: models by content hash, software, machine, threads."""

from __future__ import annotations

import hashlib
import json

import pytest
from cli_runs import REPO, specsched

from specsched.runtime.core.config import RunConfig
from specsched.runtime.engine import provenance as prov


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCHED_CACHE", str(tmp_path / "cache"))


def _safetensors(path, shapes: dict[str, list[int]], fill: bytes = b"\0") -> None:
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + fill * offset)


def test_a_model_is_named_by_the_hash_of_its_weights_and_its_parameter_count(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"_name_or_path": "my-model"}')
    _safetensors(model / "model.safetensors", {"a": [3, 4], "b": [5]})
    d = prov.describe(model, "fp32")
    assert d["name"] == "my-model" and d["parameters"] == 17 and d["preset"] is None
    assert d["sha256"] == hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()
    _safetensors(model / "model.safetensors", {"a": [3, 4], "b": [5]}, fill=b"\1")  # same size, new content
    again = prov.describe(model, "fp32")["sha256"]
    assert again == hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest() != d["sha256"]


@pytest.mark.parametrize("content", [b"not weights", (12).to_bytes(8, "little") + b"[1, 2, 3]   ",
                                     (9).to_bytes(8, "little") + b"{not json"])
def test_weights_that_are_not_safetensors_are_named_by_hash_and_count_no_parameters(tmp_path, content):
    model = tmp_path / "m"
    model.mkdir()
    (model / "model.safetensors").write_bytes(content)
    d = prov.describe(model, "fp32")
    assert d["parameters"] is None and d["sha256"] == hashlib.sha256(content).hexdigest()


def test_sim_records_say_so_and_name_the_software_and_machine():
    block = prov.provenance(RunConfig(backend="sim", prompts=["a"]), {"verifier": 1})
    assert block["models"] == {"backend": "sim", "target": None, "draft": None}
    assert block["software"]["versions"]["msgpack"] and block["software"]["python"]
    assert block["threads"]["children"] == {"verifier": 1} and block["machine"]["cores"] >= 1
    text = prov.summary(block)
    assert "models: sim backend" in text and "specsched" in text and "cores" in text
    assert "not recorded" in prov.summary(None)


def test_replay_prints_where_a_trace_came_from(tmp_path):
    trace = tmp_path / "t.json"
    out = specsched("run", "--backend", "sim", "--prompt", "a b", "--workers", "1", "--max-new-tokens", "4",
                    "--sim-draft-ms", "1", "--sim-verify-ms", "1", "--trace", str(trace), "--quiet")
    assert out.returncode == 0, out.stderr
    replayed = specsched("replay", str(trace), "--final")
    assert replayed.returncode == 0, replayed.stderr
    assert "models: sim backend" in replayed.stdout and "machine:" in replayed.stdout


def test_the_commit_is_read_from_git_files_loose_packed_or_detached(tmp_path):
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text("# pack-refs with: peeled\n" + "a" * 40 + " refs/heads/main\n")
    assert prov.head_commit(git) == "a" * 40
    (git / "refs" / "heads" / "main").write_text("b" * 40 + "\n")  # a loose ref wins over the packed one
    assert prov.head_commit(git) == "b" * 40
    (git / "HEAD").write_text("c" * 40 + "\n")
    assert prov.head_commit(git) == "c" * 40
    assert prov.head_commit(tmp_path / "nothing") is None


def test_a_checkout_records_its_commit_as_git_says():
    import subprocess

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert prov.checkout()["git_commit"] == head.stdout.strip()
