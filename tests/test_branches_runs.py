"""Self-Draft end to end: greedy output equals target-only decoding under every policy, with the caches as
the run fills them and with a corpus cache of garbage; on the sim backend and on a tiny transformers pair;
bad branch flags cost one line."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from cli_runs import assert_one_error_line, specsched
from fp32 import assert_greedy_equal
from helpers import outputs, run_ok, sim_config, words

from specsched.policies.loader import BUILTIN
from specsched.runtime.core.config import RunConfig
from specsched.runtime.engine.engine import Engine
from specsched.runtime.models.corpus_cache import count, save
from tests.tiny_hf import logits_after, make_pair

VOCAB = 64
PROMPTS = [words(VOCAB, (5, 7, 9, 11, 13, 15, 17)), words(VOCAB, (3, 9)), words(VOCAB, (11, 13, 2, 4, 6, 8))]
SHAPE = dict(layers=2, width=128)  # the tiny models' longest reduction: see tests/fp32.py


def garbage_cache(path, vocab: int, seed: int = 0) -> str:
    """A corpus cache of random text: every candidate it proposes is noise (min_count 1 keeps them all)."""
    rng = np.random.default_rng(seed)
    save(path, count([rng.integers(0, vocab, 3000).tolist()], min_count=1), {"tokenizer": None})
    return str(path)


@pytest.fixture(scope="module")
def sim_ar():
    return outputs(run_ok(sim_config(mode="ar", prompts=PROMPTS, max_new_tokens=40)))


def test_every_policy_gives_target_only_output_with_branches_on_sim(sim_ar, tmp_path):
    """Every policy with `both` and a garbage cache (model drafts, lane and noise candidates together); the
    lanes alone and the lanes with noise under a policy of each kind: one at a time, batched, commit-first."""
    garbage = garbage_cache(tmp_path / "g.npz", VOCAB)
    runs = [(policy, "both", garbage) for policy in BUILTIN] + \
        [(policy, "branches", corpus) for policy in ("fcfs", "batch", "commit-first") for corpus in ("off", garbage)]
    with Engine(sim_config()) as e:
        for policy, drafter, corpus in runs:
            record = e.generate(PROMPTS, mode="seed", policy=policy, drafter=drafter, corpus_cache=corpus,
                                branches=3, branch_length=5, max_new_tokens=40)
            assert record.status == "ok", (policy, record.error)
            assert outputs(record) == sim_ar, (policy, drafter, corpus)
            assert record.collected.counters["lane_tokens"] > 0


def test_branches_commit_more_than_one_token_per_forward_on_repetitive_text():
    """The sim target is a Markov chain of order 2: lanes running on it learn its true 4-grams, and a
    greedy chain cycles, so once lanes have met the cycle the caches predict it. A user sees > 1 token per
    target forward (and the serial sd arm, one sequence, so nothing else shares the forwards)."""
    record = run_ok(sim_config(mode="sd", drafter="branches", prompts=[PROMPTS[0]], branches=4, branch_length=6,
                               max_new_tokens=120, sim_vocab=16))
    assert record.metrics.mean_tokens_per_verify > 1.2
    assert record.collected.counters["accepted"] > 0


def test_sampled_branches_run_to_the_end_under_every_drafter():
    for drafter in ("branches", "both"):
        record = run_ok(sim_config(prompts=PROMPTS, drafter=drafter, temperature=1.0, top_k=20, seed=3,
                                   max_new_tokens=24))
        assert all(1 <= len(t) <= 24 for t in outputs(record)) and record.collected.counters["lane_tokens"] > 0


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("tiny"))


# On transformers a policy matters to the output only through the forwards it makes: one draft at a time or
# several padded into one batch. Every policy's order is covered on sim above, and every policy on
# transformers with model drafts (test_hf_backend.py); here, the policies that shape the forwards.
FORWARD_SHAPES = ("fcfs", "batch", "goodput", "commit-first")


def test_greedy_branches_on_transformers_equal_target_only_decoding_alone_and_batched(pair, tmp_path):
    target, draft = pair
    prompts = ["w1 w2 w3 w1 w2", "w5 w6"]
    base = RunConfig(backend="hf", target=str(target), draft=str(draft), prompts=prompts, max_new_tokens=16)
    garbage = garbage_cache(tmp_path / "g.npz", 32)
    with Engine(base) as e:
        ar = outputs(e.generate(prompts, mode="ar"))
        for policy in FORWARD_SHAPES:
            for drafter, corpus in (("branches", "auto"), ("both", garbage)):
                record = e.generate(prompts, policy=policy, drafter=drafter, corpus_cache=corpus, branches=2,
                                    branch_length=5)
                assert record.status == "ok", (policy, record.error)
                assert_greedy_equal(outputs(record), ar, logits_after(target, prompts), **SHAPE)


def test_a_self_draft_engine_reads_no_draft_weights_until_a_job_wants_the_draft_model(pair, tmp_path):
    """--drafter branches: the target drafts for itself, so its workers never load the draft model; a later
    job of the same engine that wants it loads it then. Shown with a draft whose weights are not weights
    (its config, read at start to check the vocabulary, is sound)."""
    target, draft = pair
    broken = tmp_path / "draft"
    shutil.copytree(draft, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    prompts = ["w1 w2 w3 w1 w2", "w5 w6"]
    base = RunConfig.of(backend="hf", target=str(target), draft=str(broken), drafter="branches", prompts=prompts,
                        max_new_tokens=8, max_restarts=0)
    with Engine(base) as e:
        record = e.generate(prompts)
        assert record.status == "ok", record.error
        wants_it = e.generate(prompts, drafter="model")
    assert wants_it.status == "failed" and "draft worker" in wants_it.error


def test_auto_finds_the_corpus_cache_built_for_the_targets_tokenizer_in_the_users_cache(pair, tmp_path,
                                                                                      monkeypatch):
    from specsched.runtime.backends.backend import get_backend
    from specsched.runtime.backends.hf_pair import tokenizer_digest
    from specsched.runtime.core.config import ConfigError
    from specsched.runtime.models.corpus_cache import SHIPPED, built_for, resolve

    monkeypatch.setenv("SPECSCHED_CACHE", str(tmp_path / "cache"))
    target, draft = pair
    backend = get_backend(RunConfig(backend="hf", target=str(target), draft=str(draft)))
    assert resolve("auto", backend) == "off"  # the shipped cache is another tokenizer's, and none was built
    built = built_for(tokenizer_digest(str(target)))
    assert tmp_path / "cache" in built.parents and SHIPPED.parent not in built.parents
    save(built, count([[3, 4, 5, 6, 7, 3, 4, 5, 6, 7]]), {"tokenizer": tokenizer_digest(str(target))})
    assert resolve("auto", backend) == str(built)
    built.write_bytes(b"broken")
    with pytest.raises(ConfigError, match=r"--corpus-cache auto \(.*\) is not a corpus cache"):
        resolve("auto", backend)


def test_building_a_corpus_cache_for_a_target_without_a_tokenizer_asks_for_out(tmp_path):
    from tests.tiny_hf import make_model

    make_model(tmp_path / "bare")
    result = specsched("models", "corpus-cache", "--target", str(tmp_path / "bare"))
    assert_one_error_line(result, 2, "has no tokenizer to name its corpus cache by: give --out FILE")


def test_a_corpus_cache_that_is_not_one_costs_one_line(tmp_path):
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(open(garbage_cache(tmp_path / "g.npz", VOCAB), "rb").read()[:200])
    meta_only = tmp_path / "meta.npz"
    np.savez(meta_only, meta=np.frombuffer(b"{}", np.uint8))
    too_wide = tmp_path / "wide.npz"
    garbage_cache(too_wide, 1000)  # token ids up to 999 for a 64-token vocabulary
    for path, fragment in ((truncated, "is not a corpus cache"), (meta_only, "is not a corpus cache"),
                           (too_wide, "the target's vocabulary has 64 tokens")):
        result = specsched("run", "--backend", "sim", "--prompt", "lo mi", "--max-new-tokens", "4",
                           "--drafter", "branches", "--corpus-cache", str(path))
        assert_one_error_line(result, 2, fragment)


@pytest.mark.parametrize("flags, fragment", [
    (["--drafter", "lanes"], "unknown --drafter 'lanes'"),
    (["--drafter", "branches", "--mode", "ar"], "--drafter branches needs draft workers"),
    (["--drafter", "branches", "--branch-length", "3"], "--branch-length must be in 4..64"),
    (["--drafter", "branches", "--branches", "-1"], "--branches must be in 0..64"),
    (["--drafter", "branches", "--corpus-cache", "/nonexistent/c.npz"], "no such file"),
    (["--branch-processes"], "--branch-processes needs branch lanes"),
    (["--corpus-cache", "/nonexistent/c.npz"], "--corpus-cache applies to --drafter branches or both"),
    (["--branches", "3"], "--branches applies to --drafter branches or both (this run uses --drafter model)"),
    (["--branches", "1"], "--branches applies to --drafter branches"),          # given at its default: still given
    (["--corpus-cache", "auto"], "--corpus-cache applies to --drafter branches"),
])
def test_bad_branch_flags_cost_one_line(flags, fragment):
    result = specsched("run", "--backend", "sim", "--prompt", "lo mi", "--max-new-tokens", "4", *flags)
    assert_one_error_line(result, 2, fragment)


def test_the_live_view_names_branch_workers_as_such():
    from specsched.runtime.apps.view.monitor import Monitor

    config = sim_config(prompts=PROMPTS[:2], drafter="branches", max_new_tokens=12)
    record = run_ok(config)
    monitor = Monitor(record.config)
    monitor.feed(record.collected)
    labels = [r.label for r in monitor.snapshot(record.collected, 0.0, final=True).rows]
    assert labels == ["verifier", "branch 0", "branch 1"]


def test_lanes_as_processes_give_the_same_output_and_leave_no_process(sim_ar):
    import psutil

    record = run_ok(sim_config(prompts=PROMPTS, drafter="branches", branches=3, branch_length=5,
                               branch_processes=True, max_new_tokens=40))
    assert outputs(record) == sim_ar
    assert record.collected.counters["lane_tokens"] > 0
    assert not [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def test_a_lane_process_that_dies_fails_its_worker_which_is_restarted_and_nothing_changes(sim_ar):
    """SIGKILL a lane process mid-run: its worker fails (it never waits forever on a dead lane), the
    supervisor restarts it from the verified prefix with fresh lanes, and the output is still `ar`'s."""
    import time

    import psutil

    from specsched.workers.lane_process import LANE_TITLE

    config = sim_config(sim_draft_ms=5, sim_verify_ms=5, max_restarts=10)
    with Engine(config) as e:
        job = e.submit(PROMPTS, drafter="branches", branches=2, branch_length=5, branch_processes=True,
                       max_new_tokens=40)
        deadline, killed = time.monotonic() + 60, None
        while killed is None and not job.done():
            assert time.monotonic() < deadline
            lanes = []
            for p in psutil.Process().children(recursive=True):
                try:
                    argv = p.cmdline()  # the command, until the lane process has named itself
                    if "specsched.workers.lane_process" in argv or argv[:1] and argv[0].startswith(LANE_TITLE):
                        lanes.append(p)
                except psutil.Error:  # gone (or a zombie) between the listing and the look
                    pass
            if lanes and job.collected.tokens:
                killed = lanes[0]
                killed.kill()
            time.sleep(0.01)
        record = job.result(timeout=120)
    assert killed is not None, "the job ended before a lane could be killed"
    assert record.status == "ok", record.error
    assert outputs(record) == sim_ar
    assert record.collected.restarts, "the worker of the killed lane was restarted"
