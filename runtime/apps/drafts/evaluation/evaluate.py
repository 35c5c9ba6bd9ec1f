"""The draft's quality bar: serial greedy speculative decoding against target-only decoding.

For each held-out prompt (chat template, fp32, greedy) the target decodes alone (AR), then with a draft
proposing k tokens per target forward (SD), in one process with the runtime's own parts: the drafter a
draft worker runs (workers/drafter.py), and the verifier's layout and acceptance rule
(scheduler/layout.py, scheduler/acceptance.py). The target checks all k in one forward; the longest
prefix matching its own argmax is accepted, plus the target's token after it, so SD emits exactly the
AR tokens (checked) and
    alpha = accepted / proposed,   tokens per verification = emitted / target forwards
(the first forward reads the prompt and the first draft together, as the verifier does).
The model-free prompt-lookup draft (copy the tokens that followed the last earlier occurrence of the
current 3-gram) is measured the same way as the baseline to beat.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from transformers import AutoTokenizer

from .....scheduler.layout import lay_out, settle
from .....workers.drafter import Drafter, Proposal
from .....workers.drafter_choice import make_drafter
from ....backends.backend import LanguageModel
from ....backends.hf_model import HFModel
from ....core.config import AUTO_LOOKUP
from ....core.sampling import SamplingParams
from ....models.draft_model import load_draft
from ....models.pull import pull
from ....models.registry import distilled_draft_dir
from ..training.prompts import heldout_tagged
from .forward_costs import forward_costs

GREEDY = SamplingParams()


class Proposer(Protocol):
    """What decode() needs of a drafter (workers/drafter.Drafter has it)."""

    def propose(self, budget: int) -> Proposal: ...
    def observe(self, committed: list[int], path: list[int] | None = None) -> None: ...


def chain(model: LanguageModel, prompt: list[int], k: int, *, lookup: int = 0,
          min_confidence: float = 0.0) -> Drafter:
    """A draft worker's greedy chain drafter for `prompt` (``--k``, ``--lookup``, ``--min-confidence``)."""
    return make_drafter(model, GREEDY, np.random.default_rng(0), prompt, k_config=(1,) * k, lookup=lookup,
                        min_confidence=min_confidence)


class LookupDrafter:
    """Prompt-lookup decoding: continue the most recent earlier occurrence of the last n-gram."""

    def __init__(self, prompt: list[int], k: int, ngram: int = 3) -> None:
        self.context, self.k, self.ngram = list(prompt), k, ngram

    def propose(self, budget: int) -> Proposal:
        ctx, found = self.context, []
        for n in range(self.ngram, 0, -1):
            tail = ctx[-n:]
            start = next((s for s in range(len(ctx) - n - 1, -1, -1) if ctx[s : s + n] == tail), None)
            if start is not None:
                found = ctx[start + n : start + n + min(self.k, budget)]
                break
        return Proposal(np.asarray(found, np.int32), np.arange(-1, len(found) - 1, dtype=np.int32), None)

    def observe(self, committed: list[int], path: list[int] | None = None) -> None:
        self.context.extend(committed)


@dataclass(slots=True)
class Decode:
    tokens: list[int]
    seconds: float
    proposed: int = 0
    accepted: int = 0
    verifies: int = 0


def decode(target: LanguageModel, prompt: list[int], max_new: int, drafter: Proposer | None = None) -> Decode:
    """Greedy decoding; with a drafter, serial speculative decoding: one round of a draft worker and the
    verifier at a time, with their code."""
    t0 = time.perf_counter()
    cache, context, res = target.new_cache(), list(prompt), Decode([], 0.0)
    nothing = Proposal(np.zeros(0, np.int32), np.zeros(0, np.int32), None)
    rng = np.random.default_rng(0)  # greedy acceptance never draws from it
    eos = target.eos_token_id
    while len(context) - len(prompt) < max_new and not (len(context) > len(prompt) and context[-1] == eos):
        budget = max_new - (len(context) - len(prompt)) - 1  # the verdict adds one target token
        proposal = drafter.propose(budget) if drafter else nothing
        layout = lay_out(target, cache, context, proposal.tokens, proposal.parents)
        rows = target.forward(cache, layout.tokens, layout.parents, first_row=layout.first_row)
        outcome = settle(target, cache, layout, rows, proposal.tokens, proposal.parents, None, GREEDY, rng)
        context += outcome.tokens
        if drafter:
            drafter.observe(outcome.tokens, outcome.path)
        res.proposed, res.accepted, res.verifies = (res.proposed + len(proposal.tokens),
                                                    res.accepted + outcome.accepted, res.verifies + 1)
    new = context[len(prompt) :]
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
    """Run AR, SD with `draft` (a module) and SD with prompt lookup on held-out prompts; return the measurements."""
    tok = AutoTokenizer.from_pretrained(target_dir)
    target, drafting = HFModel(str(target_dir), "fp32"), HFModel.of(draft)
    rows = {name: Row(name) for name in ("ar", "sd", "lookup", "sd+lookup", "sd+lookup+stop")}
    identical = True
    tagged = heldout_tagged(prompts, gsm8k=gsm8k)
    for i, (_, text) in enumerate(tagged):
        chat = [{"role": "user", "content": text}]
        ids = list(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))
        ar = decode(target, ids, max_new)
        sd = decode(target, ids, max_new, chain(drafting, ids, k))
        lk = decode(target, ids, max_new, LookupDrafter(ids, k))
        hy = decode(target, ids, max_new, chain(drafting, ids, k, lookup=AUTO_LOOKUP))
        # adaptive length: stop below the draft's top probability 0.4 (transformers' assisted-generation default)
        st = decode(target, ids, max_new, chain(drafting, ids, k, lookup=AUTO_LOOKUP, min_confidence=STOP_BELOW))
        identical &= ar.tokens == sd.tokens == lk.tokens == hy.tokens == st.tokens
        for name, run in zip(rows, (ar, sd, lk, hy, st)):
            rows[name].runs.append(run)
        log(f"prompt {i + 1}/{prompts}: {len(ar.tokens)} tokens, sd accepted {sd.accepted}/{sd.proposed}")
    target_ms, draft_ms = forward_costs(target.model, draft, k=k)
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
    """`python -m specsched.runtime.apps.drafts.evaluation.evaluate [--draft DIR]`: the quality-bar measurements."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--draft", type=Path, default=None, help="draft directory (default: the shipped distilled draft)")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gsm8k", type=Path, default=None, help="GSM8K test jsonl: half the prompts come from it")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target_dir = pull()
    draft = load_draft(args.draft or distilled_draft_dir(), torch.float32, target_dir=target_dir)
    result = evaluate(target_dir, draft, prompts=args.prompts, max_new=args.max_new, k=args.k, gsm8k=args.gsm8k)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
