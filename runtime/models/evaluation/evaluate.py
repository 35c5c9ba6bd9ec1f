"""The draft's quality bar: serial greedy speculative decoding against target-only decoding.

For each held-out prompt (chat template, fp32, greedy) the target decodes alone (AR), then with a draft
proposing k tokens per target forward (SD). The target checks all k in one forward of k+1 tokens;
the longest prefix matching its own argmax is accepted, plus the target's token after it, so SD emits
exactly the AR tokens (checked) and
    alpha = accepted / proposed,   tokens per verification = emitted / target forwards.
The model-free prompt-lookup draft (copy the tokens that followed the last earlier occurrence of the
current 3-gram) is measured the same way as the baseline to beat.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import torch

from specsched.runtime.core.config import AUTO_LOOKUP
from specsched.runtime.models.evaluation.forward_costs import crop_to, forward_costs
from specsched.runtime.models.growing_cache import GrowingCache
from specsched.workers.drafter import confidence
from specsched.workers.lookup import NgramIndex


class Proposer(Protocol):
    def propose(self, ctx: list[int], k: int) -> list[int]: ...
    def rollback(self, valid: int) -> None: ...


class ModelProposer:
    """Greedy proposals from a causal LM with a KV cache that follows the accepted context; with
    `lookup` >= 2 the n-gram index of the context is asked first (the runtime drafters' `--lookup`)."""

    def __init__(self, model: torch.nn.Module, lookup: int = 0, min_confidence: float = 0.0) -> None:
        self.model, self.cache = model, GrowingCache()
        self.ngrams = NgramIndex(lookup) if lookup >= 2 else None
        self.min_confidence = min_confidence  # stop drafting below this top probability (drafters' rule)

    def propose(self, ctx: list[int], k: int) -> list[int]:
        if self.ngrams is not None:
            self.ngrams.extend(ctx[self.ngrams.seen :])
        out: list[int] = []
        feed = ctx[self.cache.get_seq_length() :]
        for _ in range(k):
            logits = self.model(torch.tensor([feed]), past_key_values=self.cache, use_cache=True).logits
            hit = self.ngrams.lookup((ctx + out)[-self.ngrams.longest :]) if self.ngrams is not None else None
            if hit is None and out and self.min_confidence:
                if confidence(logits[0, -1].float().numpy()) < self.min_confidence:  # the drafters' rule
                    break
            feed = [int(logits[0, -1].argmax()) if hit is None else hit]
            out.append(feed[0])
        return out

    def rollback(self, valid: int) -> None:
        crop_to(self.cache, valid)


class LookupProposer:
    """Prompt-lookup decoding: continue the most recent earlier occurrence of the last n-gram."""

    def __init__(self, ngram: int = 3) -> None:
        self.ngram = ngram

    def propose(self, ctx: list[int], k: int) -> list[int]:
        for n in range(self.ngram, 0, -1):
            tail = ctx[-n:]
            for start in range(len(ctx) - n - 1, -1, -1):
                if ctx[start : start + n] == tail:
                    return ctx[start + n : start + n + k]
        return []

    def rollback(self, valid: int) -> None:
        pass


@dataclass(slots=True)
class Decode:
    tokens: list[int]
    seconds: float
    proposed: int = 0
    accepted: int = 0
    verifies: int = 0


@torch.inference_mode()
def decode(target, prompt: list[int], max_new: int, eos: int, proposer: Proposer | None = None, k: int = 4) -> Decode:
    """Greedy decoding; with a proposer, serial speculative decoding. Target cache = context minus last token."""
    t0 = time.perf_counter()
    cache = GrowingCache()  # what the runtime's workers use
    logits = target(torch.tensor([prompt]), past_key_values=cache, use_cache=True).logits
    ctx = prompt + [int(logits[0, -1].argmax())]
    res = Decode([], 0.0, verifies=1)  # the prefill forward produced the first token
    while len(ctx) - len(prompt) < max_new and ctx[-1] != eos:
        draft = proposer.propose(ctx, k) if proposer else []
        logits = target(torch.tensor([ctx[-1:] + draft]), past_key_values=cache, use_cache=True).logits
        best = logits[0].argmax(-1).tolist()
        n = 0
        while n < len(draft) and draft[n] == best[n]:
            n += 1
        old = len(ctx)
        ctx += draft[:n] + [best[n]]
        crop_to(cache, len(ctx) - 1)
        if proposer:
            proposer.rollback(old + n)
        res.proposed, res.accepted, res.verifies = res.proposed + len(draft), res.accepted + n, res.verifies + 1
    new = ctx[len(prompt) :]
    if eos in new:
        new = new[: new.index(eos) + 1]
    res.tokens, res.seconds = new[:max_new], time.perf_counter() - t0
    return res


@dataclass(slots=True)
class Row:
    """Totals over the prompts for one decoding mode."""

    name: str
    runs: list[Decode] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(len(r.tokens) for r in self.runs)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / sum(r.seconds for r in self.runs)

    @property
    def alpha(self) -> float:
        return sum(r.accepted for r in self.runs) / max(1, sum(r.proposed for r in self.runs))

    @property
    def per_verify(self) -> float:
        return self.tokens / max(1, sum(r.verifies for r in self.runs))


STOP_BELOW = 0.4  # --min-confidence of the "sd+lookup+stop" row


@dataclass(frozen=True, slots=True)
class Bar:
    """The issue's quality bar for the shipped draft."""

    alpha: float = 0.40
    per_verify: float = 2.2
    cost_ratio: float = 1 / 30


def by_family(families: list[str], rows: dict[str, Row], vocab_ids: torch.Tensor | None = None) -> dict:
    """Where the draft loses: α of the draft rows per prompt family, and the share of the target's own
    (AR) tokens that the draft's restricted vocabulary can never propose (absent for a full-vocabulary draft)."""
    vocab = set(vocab_ids.tolist()) if vocab_ids is not None else None
    out: dict[str, dict] = {}
    for family in dict.fromkeys(families):  # first-seen order
        idx = [i for i, f in enumerate(families) if f == family]
        entry: dict[str, float | int] = {"prompts": len(idx)}
        for name in ("sd", "sd+lookup"):
            entry[f"alpha {name}"] = round(Row(name, [rows[name].runs[i] for i in idx]).alpha, 3)
        if vocab is not None:
            tokens = [t for i in idx for t in rows["ar"].runs[i].tokens]
            entry["outside_vocab"] = round(sum(t not in vocab for t in tokens) / max(1, len(tokens)), 3)
        out[family] = entry
    return out


def evaluate(target_dir, draft, *, prompts: int = 24, max_new: int = 128, k: int = 4, gsm8k=None, log=print) -> dict:
    """Run AR, SD with `draft` and SD with prompt lookup on held-out prompts; return the measurements."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specsched.runtime.models.training.prompts import heldout_tagged

    tok = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    rows = {name: Row(name) for name in ("ar", "sd", "lookup", "sd+lookup", "sd+lookup+stop")}
    identical = True
    tagged = heldout_tagged(prompts, gsm8k=gsm8k)
    for i, (_, text) in enumerate(tagged):
        chat = [{"role": "user", "content": text}]
        ids = list(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))
        ar = decode(target, ids, max_new, tok.eos_token_id)
        sd = decode(target, ids, max_new, tok.eos_token_id, ModelProposer(draft), k)
        lk = decode(target, ids, max_new, tok.eos_token_id, LookupProposer(), k)
        hy = decode(target, ids, max_new, tok.eos_token_id, ModelProposer(draft, lookup=AUTO_LOOKUP), k)
        # adaptive length: stop below the draft's top probability 0.4 (transformers' assisted-generation default)
        st = decode(target, ids, max_new, tok.eos_token_id, ModelProposer(draft, AUTO_LOOKUP, STOP_BELOW), k)
        identical &= ar.tokens == sd.tokens == lk.tokens == hy.tokens == st.tokens
        for name, run in zip(rows, (ar, sd, lk, hy, st)):
            rows[name].runs.append(run)
        log(f"prompt {i + 1}/{prompts}: {len(ar.tokens)} tokens, sd accepted {sd.accepted}/{sd.proposed}")
    target_ms, draft_ms = forward_costs(target, draft, k=k)
    ar = rows["ar"]
    result = {
        "prompts": prompts,
        "max_new": max_new,
        "k": k,
        "identical_to_ar": identical,
        "target_forward_ms": round(target_ms, 2),
        "draft_forward_ms": round(draft_ms, 3),
        "cost_ratio": round(draft_ms / target_ms, 4),
        "threads": torch.get_num_threads(),
    }
    for name, row in rows.items():
        result[name] = {
            "tokens_per_s": round(row.tokens_per_s, 2),
            "speedup": round(row.tokens_per_s / ar.tokens_per_s, 3),
            "alpha": round(row.alpha, 3),
            "tokens_per_verify": round(row.per_verify, 3),
        }
    result["by_family"] = by_family([f for f, _ in tagged], rows, getattr(draft, "vocab_ids", None))
    bar = Bar()
    sd = result["sd"]
    result["passes"] = {  # judged on the distilled draft alone (row "sd"); the other rows are reported beside it
        "alpha": sd["alpha"] >= bar.alpha,
        "tokens_per_verify": sd["tokens_per_verify"] >= bar.per_verify,
        "cost_ratio": result["cost_ratio"] <= bar.cost_ratio,
        "sd_faster_than_ar": sd["speedup"] > 1.0,
        "identical": identical,
    }
    return result


def main() -> None:
    """`python -m specsched.runtime.models.evaluation.evaluate [--draft DIR]`: print the quality-bar measurements."""
    import argparse
    import json
    from pathlib import Path

    from specsched.runtime.models.draft_model import load_draft
    from specsched.runtime.models.pull import pull
    from specsched.runtime.models.registry import default_draft_dir

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--draft", type=Path, default=None, help="draft directory (default: the shipped draft)")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gsm8k", type=Path, default=None, help="GSM8K test jsonl: half the prompts come from it")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target_dir = pull()
    draft = load_draft(args.draft or default_draft_dir(), torch.float32, target_dir=target_dir)
    result = evaluate(target_dir, draft, prompts=args.prompts, max_new=args.max_new, k=args.k, gsm8k=args.gsm8k)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
