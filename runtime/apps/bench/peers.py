"""Outside peers: Hugging Face transformers' own speculative decoding, in this process, same target.

- ``hf-assisted``: ``target.generate(..., assistant_model=draft)``. Our distilled draft is a DraftLM (an
  nn.Module over the target's frozen embeddings), which generate() cannot take, so `draft_as_llama`
  rebuilds it as a plain LlamaForCausalLM computing the same logits (see there).
  A feature draft reads the target's features, which generate() does not give: with the default pair's
  feature draft, the assistant is the pair's distilled draft; a feature draft named by --draft skips the arm.
- ``hf-lookup``: ``target.generate(..., prompt_lookup_num_tokens=k)``, model-free prompt lookup.

Both run the sequences one after another (assisted generation supports batch size 1 only), on the
tokenised prompts of the runtime arms (same chat template), with the same sampling settings, draft
length k (the tree's depth when --k-config is given: HF drafts chains) and every core for torch, like
our ``ar`` arm's verifier (``--threads`` when given). HF's adaptive draft length (the "heuristic"
schedule and the confidence threshold) is switched off, so every arm drafts k tokens per round.
Sampled runs are seeded per sequence. tokens/s = new tokens / time inside generate().
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import LlamaForCausalLM, PreTrainedModel
from transformers.utils import logging as hf_logging

from ...backends.backend import Backend
from ...backends.hf_model import HFModel
from ...core.config import RunConfig
from ...models.draft_files import is_feature_draft
from ...models.draft_model import DraftLM
from ...models.registry import resolve_draft
from ..run.app import prepare
from ..view.gpu_usage import GpuWatch
from .arms import PEER_ARMS
from .measure import Sample


@torch.no_grad()
def draft_as_llama(draft: DraftLM) -> LlamaForCausalLM:
    """The DraftLM as a LlamaForCausalLM with the same logits, over the full target vocabulary.

    - input embeddings: E' = E @ W_in^T, row by row what DraftLM computes as proj_in(embed(ids));
    - core: the same decoder layers and final norm (same LlamaConfig, so the same rotary embedding);
    - output layer: the head's rows scattered to ``vocab_ids``, zero rows elsewhere, plus a bias of 0 at
      ``vocab_ids`` and -inf elsewhere, so tokens outside the draft vocabulary keep q = 0 exactly as in
      DraftLM (the -inf bias needs a biased lm_head; LlamaForCausalLM calls whatever `lm_head` it holds).

    The one difference: E' is precomputed as one matrix product, so its float rounding may differ from
    DraftLM's per-token product in the last bits - which can change a near-tie drafted token, never the
    correctness of generate()'s output.
    """
    cfg = draft.cfg
    llama = cfg.llama()
    llama.vocab_size = cfg.target_vocab
    model = LlamaForCausalLM(llama)
    model.model.embed_tokens.weight.copy_(draft.embed.weight.float() @ draft.proj_in.weight.float().T)
    core = {k: v for k, v in draft.core.state_dict().items() if not k.startswith("embed_tokens.")}
    missing, unexpected = model.model.load_state_dict(core, strict=False)
    if unexpected or set(missing) != {"embed_tokens.weight"}:
        raise RuntimeError(f"draft core does not map onto LlamaModel: missing {missing}, unexpected {unexpected}")
    head = nn.Linear(cfg.hidden, cfg.target_vocab, bias=True)
    head.weight.zero_()
    head.weight[draft.vocab_ids] = draft.head.weight.float()
    head.bias.fill_(float("-inf"))
    head.bias[draft.vocab_ids] = 0.0
    model.lm_head = head
    return model.to(draft.dtype).eval()


class ForwardCounter:
    """Counts a model's forward calls and the tokens they read (a forward pre-hook).

    In HF assisted / prompt-lookup generation each target forward verifies one round: it reads the
    last accepted token plus the c candidates (the first forward reads the prompt P instead of that
    token), keeps n accepted candidates plus one target token, and crops its cache to that. So over
    one generate() with F forwards reading R tokens in all and N new tokens:
        drafted = R - P - (F - 1),   accepted = N - F,   tokens per verification = N / F.
    """

    def __init__(self, model: nn.Module) -> None:
        self.forwards = self.tokens = 0
        self._handle = model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.forwards += 1
        self.tokens += int(ids.shape[1]) if ids is not None else 0

    def reset(self) -> None:
        self.forwards = self.tokens = 0

    def close(self) -> None:
        self._handle.remove()


@dataclass(slots=True)
class LoadedPeers:
    """What both peer arms share, loaded once: the target, the assistant, the tokenised prompts."""

    config: RunConfig
    target: PreTrainedModel
    assistant: PreTrainedModel | None
    eos: int | None
    prompts: list[list[int]]
    device: str = "cpu"


def as_assistant(draft: nn.Module, k: int) -> PreTrainedModel:
    """The draft as generate()'s ``assistant_model``, drafting exactly k tokens every round: HF's adaptive
    length (the "heuristic" schedule, the confidence threshold) is off, as our workers have none."""
    model = draft_as_llama(draft) if isinstance(draft, DraftLM) else draft
    gen = model.generation_config
    gen.num_assistant_tokens = k
    gen.num_assistant_tokens_schedule = "constant"
    gen.assistant_confidence_threshold = 0.0
    return model


def assistant_draft(backend: Backend, base: RunConfig) -> str | None:
    """The draft generate() drafts with: the run's own, the preset's distilled draft in place of its feature
    draft, or None for a feature draft named by --draft (generate() gives it no features)."""
    draft = backend.paths()[1]
    if not is_feature_draft(Path(draft)):
        return draft
    distilled = resolve_draft(base.draft, base.target, features=False)
    return None if is_feature_draft(distilled) else str(distilled)


def load_peers(base: RunConfig, *, assistant: bool) -> LoadedPeers:
    """The hf backend's own target and draft, loaded as `specsched run` loads them."""
    backend, _, prompts = prepare(dataclasses.replace(base))
    target_path, _ = backend.paths()
    placement = backend.placement()
    target = HFModel(str(target_path), base.model_dtype, placement=placement)
    helper = None
    if assistant and (draft_path := assistant_draft(backend, base)) is not None:
        # built on the host (draft_as_llama copies weights by index), then placed beside the target
        draft = HFModel(draft_path, base.model_dtype, target_dir=str(target_path)).model
        helper = placement.adopt(as_assistant(draft, len(base.shape.widths)))
    return LoadedPeers(base, target.model, helper, target.eos_token_id, prompts, placement.name)


@dataclass(slots=True)
class PeerArm:
    name: str
    description: str
    peers: LoadedPeers
    skipped: str | None = None

    def generate_kwargs(self) -> dict:
        c = self.peers.config
        kw: dict = {"max_new_tokens": c.max_new_tokens, "eos_token_id": self.peers.eos, "pad_token_id": self.peers.eos,
                    "do_sample": not c.sampling.greedy}
        if not c.sampling.greedy:   # top_k 0 = off, as in our runtime (HF's own default would be 50)
            kw.update(temperature=c.sampling.temperature, top_k=c.sampling.top_k, top_p=c.sampling.top_p)
        if self.name == "hf-assisted":
            kw["assistant_model"] = self.peers.assistant
        else:
            kw["prompt_lookup_num_tokens"] = len(c.shape.widths)
        return kw

    def run(self) -> Sample:
        p, kwargs = self.peers, self.generate_kwargs()
        threads, verbosity = torch.get_num_threads(), hf_logging.get_verbosity()
        torch.set_num_threads(p.config.verifier_threads or os.cpu_count() or 1)
        hf_logging.set_verbosity_error()   # generate() warns about its own internal assistant call, every round
        counter = ForwardCounter(p.target)
        tokens, seconds, forwards, drafted, accepted = [], 0.0, 0, 0, 0
        watch = GpuWatch({os.getpid()}, on=p.device.startswith("cuda"))  # generate() runs in this process
        try:
            with watch:
                for seq, prompt in enumerate(p.prompts):
                    ids = torch.tensor([prompt], dtype=torch.long, device=p.device)
                    if not p.config.sampling.greedy:
                        torch.manual_seed((p.config.seed * 1_000_003 + seq) % 2**63)  # a stream per (seed, sequence)
                    counter.reset()
                    t0 = time.perf_counter()
                    out = p.target.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
                    seconds += time.perf_counter() - t0
                    new = out[0, len(prompt):].tolist()
                    tokens.append(new)
                    forwards += counter.forwards
                    drafted += counter.tokens - len(prompt) - (counter.forwards - 1)
                    accepted += len(new) - counter.forwards
        finally:
            counter.close()
            torch.set_num_threads(threads)
            hf_logging.set_verbosity(verbosity)
        n = sum(len(t) for t in tokens)
        return Sample(tokens_per_s=n / seconds if seconds > 0 else 0.0, wall_s=seconds, tokens=tokens,
                      acceptance_rate=accepted / drafted if drafted > 0 else None,
                      mean_tokens_per_verify=n / forwards if forwards else None,
                      gpu_sm_percent=watch.sm_percent, gpu_busy_percent=watch.busy_percent)


def build_peers(names: list[str], base: RunConfig) -> list[PeerArm]:
    peers = load_peers(base, assistant="hf-assisted" in names)
    refused = "generate() gives a feature draft no target features" if peers.assistant is None else None
    return [PeerArm(n, PEER_ARMS[n], peers, skipped=refused if n == "hf-assisted" else None) for n in names]
