"""The transformers backend on tiny random models built offline: lossless end to end."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import psutil
import pytest

from specsched.runtime.apps.run.app import run
from specsched.runtime.core.config import RunConfig
from specsched.runtime.engine.engine import Engine
from tests.fp32 import assert_close, assert_greedy_equal
from tests.tiny_hf import logits_after, make_pair

PROMPTS = ["w1 w2 w3", "w5 w6", "w7 w8 w9 w10 w11"]
# every reduction of the tiny models is at most 128 long (intermediate size), over 2 layers: see tests/fp32.py
SHAPE = dict(layers=2, width=128)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("tiny"))


def _run(pair, **kw):
    target, draft = pair
    kw.setdefault("max_new_tokens", 16)
    record = run(RunConfig.of(backend="hf", target=str(target), draft=str(draft), **kw))
    assert record.status == "ok", record.error
    return record


def _tokens(record):
    return [s.tokens for s in record.sequences]


def _assert_greedy(pair, got, ar, prompts):
    """Token for token, unless the first difference is a tie within fp32 rounding (tests/fp32.py)."""
    assert_greedy_equal(got, ar, logits_after(pair[0], prompts), **SHAPE)


@pytest.fixture(scope="module")
def ar(pair):
    """Target-only decoding of PROMPTS (its own run): what every greedy mode is held to."""
    return _tokens(_run(pair, mode="ar", prompts=PROMPTS))


@pytest.fixture(scope="module")
def engine(pair):
    """One engine on the pair for the jobs below: a job's mode and sampling are its own, and the engine's
    processes serve each job in turn (each engine would otherwise start its own, importing torch again)."""
    target, draft = pair
    with Engine(RunConfig(backend="hf", target=str(target), draft=str(draft), max_new_tokens=16)) as e:
        yield e


def test_greedy_modes_match_target_only_decoding(pair, ar, engine):
    assert all(len(t) == 16 or t[-1] == 1 for t in ar)
    for mode in ("sd", "seed", "parallel"):
        record = engine.generate(PROMPTS, mode=mode)
        assert record.status == "ok", record.error
        _assert_greedy(pair, _tokens(record), ar, PROMPTS)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["fcfs", "priority", "rr"])
@pytest.mark.parametrize("n", [1, 3, 8])
def test_greedy_seed_matches_ar_for_every_policy_and_width(pair, policy, n):
    prompts = [f"w{i + 2} w{i + 3}" for i in range(n)]
    ar = _tokens(_run(pair, mode="ar", prompts=prompts))
    prio = list(range(n, 0, -1)) if policy == "priority" else []
    _assert_greedy(pair, _tokens(_run(pair, mode="seed", policy=policy, priorities=prio, prompts=prompts)), ar, prompts)


def test_sampled_seed_and_sd_share_per_sequence_streams(engine):
    # a sequence's streams are its job's, wherever the job falls in the engine's life
    seed, sd = (engine.generate(["w3 w4"], mode=mode, workers=2, temperature=1.0, top_k=20, seed=7)
                for mode in ("seed", "sd"))
    assert seed.status == sd.status == "ok", (seed.error, sd.error)
    assert _tokens(seed) == _tokens(sd)
    assert seed.metrics.acceptance_rate is not None and 0 < seed.metrics.acceptance_rate < 1


def test_rollback_and_batching_agree_with_a_fresh_forward(pair):
    from specsched.runtime.backends.hf_model import HFModel

    model = HFModel(str(pair[0]), "fp32")
    fresh = model.new_cache()
    reference = model.forward(fresh, [2, 3, 4, 5, 6])
    cache = model.new_cache()
    model.forward(cache, [2, 3, 4, 9, 9, 9])  # a draft that gets rejected after 3 tokens
    model.crop(cache, 3)
    assert_close(model.forward(cache, [5, 6]), reference[3:], **SHAPE)
    a, b = model.new_cache(), model.new_cache()
    model.forward(a, [2, 3, 4])
    rows = model.forward_batch([a, b], [[5, 6], [7, 8, 9, 10]])  # different lengths: padding
    assert_close(rows[0], reference[3:], **SHAPE)
    assert_close(rows[1], model.forward(model.new_cache(), [7, 8, 9, 10]), **SHAPE)
    assert a.tokens == [2, 3, 4, 5, 6] and b.tokens == [7, 8, 9, 10]
    # one plain continuation (ar's step, a chain's verification) skips the batch layout: the same rows,
    # and its cache grows in place instead of being copied into a new one
    c = model.new_cache()
    model.forward(c, [2, 3, 4])
    past = c.past
    one = model.forward_batch([c], [[5, 6]], [[2, 3]], first_rows=[1])  # a chain said as a tree
    assert c.past is past and c.tokens == [2, 3, 4, 5, 6]
    assert_close(one[0], reference[4:], **SHAPE)


@pytest.mark.slow  # a real model end to end, 10 s
def test_the_record_names_its_models_by_content_and_export_prints_them(pair, tmp_path):
    import hashlib

    import torch
    from transformers import LlamaForCausalLM

    record = _run(pair, mode="sd", prompts=["w1"], max_new_tokens=2)
    made_by = record.provenance
    for role, path in zip(("target", "draft"), pair):
        model = made_by["models"][role]
        assert model["path"] == str(path.resolve()) and model["dtype"] == "fp32"
        assert model["sha256"] == hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
        assert model["parameters"] == sum(p.numel() for p in LlamaForCausalLM.from_pretrained(path).parameters())
    assert made_by["machine"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    record.write_json(tmp_path / "r.json")
    out = subprocess.run([sys.executable, "-m", "specsched", "export", str(tmp_path / "r.json"), "--svg",
                          str(tmp_path / "r.svg")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    target = made_by["models"]["target"]
    line = f"target: target (fp32, {target['parameters'] / 1e6:.2f}M parameters) sha256 {target['sha256'][:16]}"
    assert line in out.stdout


@pytest.mark.slow  # bad input on real models, end to end: 10-15 s each
def test_vocab_mismatch_is_one_clear_line_before_any_process(tmp_path):
    target, draft = make_pair(tmp_path, draft_vocab=64)
    out = subprocess.run([sys.executable, "-m", "specsched", "run", "--backend", "hf", "--target",
                          str(target), "--draft", str(draft)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("specsched: error: draft and target vocabularies differ")
    assert "Traceback" not in out.stderr


MISSING_MODEL = """
import sys
from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.engine.engine import Engine
from specsched.runtime.models.errors import ModelError
try:
    Engine(RunConfig(backend=sys.argv[1], target=sys.argv[2], draft="tiny"))
except (ConfigError, ModelError) as exc:  # the CLI's one line
    print(exc)
print(sorted({"torch", "transformers"} & sys.modules.keys()))
"""


@pytest.mark.parametrize("backend,target,error", [
    ("hf", "no-such-dir/", "unknown model"),
    ("llamacpp", "no-such-file.gguf", "no such GGUF file"),
])
def test_a_model_that_is_not_there_is_refused_before_torch_is_imported(tmp_path, backend, target, error):
    """A mistyped --target costs the user a second, not the ~5 s that importing torch and transformers takes."""
    out = subprocess.run([sys.executable, "-c", MISSING_MODEL, backend, str(tmp_path / target)],
                         capture_output=True, text=True, timeout=120)
    message, imported = out.stdout.strip().splitlines()
    assert error in message
    assert imported == "[]"


TREE_CASES = [([1, 1, 1], "fcfs"), ([2, 2, 1], "fcfs"), ([4, 2, 1, 1], "fcfs"),
              ([1, 1, 1], "batch"), ([2, 2, 1], "batch"), ([4, 2, 1, 1], "batch")]


@pytest.mark.parametrize("k_config,policy", [
    pytest.param(k, p, marks=[] if (k, p) == ([2, 2, 1], "batch") else [pytest.mark.slow]) for k, p in TREE_CASES])
def test_greedy_tree_drafts_and_batched_verification_match_ar(pair, ar, k_config, policy):
    # --lockstep for batch: the first step holds all three workers' drafts, so a batch is certain rather
    # than a matter of drafts happening to arrive together (on a busy 2-core machine each came alone)
    seed = _run(pair, mode="seed", prompts=PROMPTS, k_config=k_config, policy=policy, max_batch=0,
                lockstep=policy == "batch")
    _assert_greedy(pair, _tokens(seed), ar, PROMPTS)
    if policy == "batch":  # the batch really happened: fewer target forwards than drafts
        assert seed.collected.counters["batched_drafts"] > seed.collected.counters["verifications"]


def test_tree_rollback_keeps_only_the_accepted_path(pair):
    from specsched.runtime.backends.hf_model import HFModel

    model = HFModel(str(pair[0]), "fp32")
    reference = model.forward(model.new_cache(), [2, 3, 4, 6, 8])
    cache = model.new_cache()
    model.forward(cache, [2, 3, 4])
    # tree after the prefix: 5 and 6 as alternatives, 7 and 8 under 6 (absolute parent indices)
    rows = model.forward(cache, [5, 6, 7, 8], [2, 2, 4, 4])
    assert_close(rows[1], reference[3], **SHAPE)   # 6 sees the prefix only, not 5
    assert_close(rows[3], reference[4], **SHAPE)   # 8 sees prefix + 6
    model.keep(cache, [0, 1, 2, 4, 6])                             # accept 6 -> 8
    assert cache.tokens == [2, 3, 4, 6, 8] and cache.linear
    assert_close(model.forward(cache, [9]), model.forward(model.new_cache(), [2, 3, 4, 6, 8, 9])[-1:], **SHAPE)


def test_first_row_computes_only_the_rows_asked_for_and_still_reads_every_token(pair):
    """A prefill asks for its last row only (layout.first_row, root_row): the rows it returns are the full
    forward's, the cache it leaves reads on exactly as after a full one, batched rows too."""
    from specsched.runtime.backends.hf_model import HFModel

    model = HFModel(str(pair[0]), "fp32")
    assert model.keep_last(3) == {"logits_to_keep": 3}  # a transformers Llama computes only the rows kept
    ctx, more = [2, 3, 4, 5, 6, 7, 8, 9], [10, 11]
    full = model.forward(model.new_cache(), ctx + more)
    for first in (0, 3, len(ctx) - 1, len(ctx)):
        cache = model.new_cache()
        rows = model.forward(cache, ctx, first_row=first)
        assert rows.shape == (len(ctx) - first, model.vocab_size)
        assert_close(rows, full[first:len(ctx)], **SHAPE)
        assert_close(model.forward(cache, more), full[len(ctx):], **SHAPE)  # the cache read every token
    assert_close(model.root_row(model.new_cache(), ctx), full[len(ctx) - 1], **SHAPE)
    # a batch of a plain continuation and a tree, each from its own first row
    a, b = model.new_cache(), model.new_cache()
    model.forward(a, ctx[:3])
    got = model.forward_batch([a, b], [ctx[3:], ctx[:4] + [12, 13]], [None, [-1, 0, 1, 2, 3, 3]], [2, 3])
    assert_close(got[0], full[5:len(ctx)], **SHAPE)
    tree = model.forward(model.new_cache(), ctx[:4] + [12, 13], [-1, 0, 1, 2, 3, 3])
    assert got[1].shape[0] == 3
    assert_close(got[1], tree[3:], **SHAPE)


@pytest.mark.slow  # bad input on real models, end to end: 10-15 s each
def test_a_job_longer_than_the_targets_positions_is_refused_before_it_runs():
    """The tiny target has 1,024 positions: past them it read positions it never learnt, and its text was
    noise (accepted in silence before)."""
    from specsched.runtime.core.config import ConfigError

    with Engine(backend="hf", target="tiny", workers=1, max_new_tokens=4) as engine:
        with pytest.raises(ConfigError, match=r"new tokens need 1,\d{3} positions; the target reads 1,024 at most"):
            engine.submit("LEONTES.", max_new_tokens=1020)
        assert engine.generate("LEONTES.", max_new_tokens=8).status == "ok"  # the engine goes on


@pytest.mark.slow  # bad input on real models, end to end: 10-15 s each
def test_a_workload_job_too_long_for_the_target_is_refused_before_the_first_job_plays(tmp_path):
    """Refused by submit as it arrived, a late job took the records of the jobs before it."""
    from cli_runs import assert_one_error_line

    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"prompt": "LEONTES."}\n{"arrival": 1, "prompt": "LEONTES.", "max_new_tokens": 1020, '
                    '"name": "long"}\n')
    command = [sys.executable, "-m", "specsched", "run", "--backend", "hf", "--target", "tiny", "--workload",
               str(jobs), "--max-new-tokens", "4"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    seen = set()   # every descendant the CLI ever had: the zygote only, no verifier (no model loaded)
    while proc.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            seen |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        time.sleep(0.05)   # a verifier would live for seconds: it loads the target
    stdout, stderr = proc.communicate(timeout=60)
    assert_one_error_line(subprocess.CompletedProcess(command, proc.returncode, stdout, stderr), 2,
                          "long: a ", "new tokens need", "the target reads 1,024 at most")
    assert "playing" not in stdout and len(seen) <= 1
