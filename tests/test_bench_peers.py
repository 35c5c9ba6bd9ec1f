"""`specsched bench`'s HF peers: our DraftLM as a LlamaForCausalLM, and transformers' assisted and
prompt-lookup generation measured like the runtime's arms (tiny random models; the real pair is slow)."""

from __future__ import annotations

import pytest
import torch
from cli_runs import bench_args

from specsched.runtime.apps.bench.arms import PEER_ARMS
from specsched.runtime.apps.bench.bench_commands import settings_from_args
from specsched.runtime.apps.bench.peers import LoadedPeers, PeerArm, as_assistant, draft_as_llama
from specsched.runtime.apps.bench.runner import run_bench
from specsched.runtime.core.config import RunConfig
from specsched.runtime.models.draft_model import DraftConfig, DraftLM
from tests.fp32 import assert_close

VOCAB, HIDDEN, EOS = 96, 64, 1


def tiny_draft(seed: int = 0) -> DraftLM:
    torch.manual_seed(seed)
    cfg = DraftConfig(hidden=32, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=64, draft_vocab=40,
                      target_vocab=VOCAB, target_hidden=HIDDEN, rope_theta=10000.0, rms_norm_eps=1e-6)
    draft = DraftLM(cfg, torch.randn(VOCAB, HIDDEN))
    with torch.no_grad():
        for p in (*draft.proj_in.parameters(), *draft.core.parameters(), *draft.head.parameters()):
            p.normal_(0, 0.3)
    ids = torch.randperm(VOCAB - 2)[: cfg.draft_vocab] + 2          # EOS (1) is outside: never drafted
    draft.vocab_ids = ids.sort().values
    return draft.eval()


def test_draft_as_llama_computes_the_draft_logits():
    draft = tiny_draft()
    llama = draft_as_llama(draft)
    ids = torch.randint(0, VOCAB, (2, 13))
    with torch.no_grad():
        ours = draft(ids, use_cache=False).logits
        theirs = llama(ids).logits
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[draft.vocab_ids] = False
    assert torch.isneginf(theirs[..., outside]).all() and torch.isneginf(ours[..., outside]).all()
    # the same weights through two implementations: equal up to fp32 rounding over 2 layers of width <= 64
    assert_close(theirs[..., draft.vocab_ids], ours[..., draft.vocab_ids], layers=2, width=64)


def peer(name: str, target, assistant, **config) -> PeerArm:
    # one torch thread: on a busy small machine, threads spin-waiting for a descheduled peer cost seconds
    c = RunConfig.of(backend="hf", workers=2, k=4, max_new_tokens=20, prompts=["a", "b"], verifier_threads=1, **config)
    return PeerArm(name, PEER_ARMS[name], LoadedPeers(c, target, assistant, EOS, [[5, 7, 9, 11], [3, 4]]))


def test_assisted_generation_counts_rounds_and_acceptance():
    """With the draft as its own assistant every drafted token is accepted: alpha = 1 and each target
    forward commits k + 1 tokens - which also shows HF drafts exactly k per round (constant schedule)."""
    target, assistant = draft_as_llama(tiny_draft()), as_assistant(tiny_draft(), 4)
    sample = peer("hf-assisted", target, assistant).run()
    plain = [target.generate(torch.tensor([p]), max_new_tokens=20, do_sample=False)[0, len(p):].tolist()
             for p in ([5, 7, 9, 11], [3, 4])]
    assert sample.tokens == plain and sample.error is None
    assert sample.acceptance_rate == 1.0 and sample.mean_tokens_per_verify == 5.0
    lookup = peer("hf-lookup", target, None).run()
    assert lookup.tokens == plain and 1.0 <= lookup.mean_tokens_per_verify <= 5.0
    assert lookup.acceptance_rate is None or 0 <= lookup.acceptance_rate <= 1


def test_sampled_peer_runs_are_seeded():
    target, assistant = draft_as_llama(tiny_draft()), as_assistant(tiny_draft(1), 4)
    runs = [peer("hf-assisted", target, assistant, temperature=1.0, seed=s).run().tokens for s in (3, 3, 4)]
    assert runs[0] == runs[1] != runs[2]


@pytest.mark.slow
def test_peers_on_the_real_default_pair():
    """hf-assisted and hf-lookup on SmolLM2-135M with the shipped draft reproduce serial AR's greedy output."""
    settings = settings_from_args(bench_args("--backend", "hf", "--arms", "sd,hf-assisted,hf-lookup", "--workers", "1",
                                        "--max-new-tokens", "16", "--repeats", "1", "--warmup", "0"))
    by_name = {a.name: a for a in run_bench(settings).arms}
    assert all(a.outputs_match_ar is True and not a.errors for a in by_name.values())
    assert by_name["hf-assisted"].median("mean_tokens_per_verify") > 1
