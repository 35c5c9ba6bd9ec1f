"""The job a request becomes: its prompts and settings on the server's defaults, submitted to the engine.

How a prompt is read is `specsched run`'s rule, in the same place: a chat request with one user message
is submitted as `run --prompt TEXT` is (the tokenizer wraps it in the target's chat template); a longer
conversation is rendered by the same template (`Tokenizer.chat_text`) and read as it stands. A completion
prompt is text to continue, read as `run --raw-prompt` reads it. Greedy text over HTTP is therefore
`run --temperature 0`'s (tests/test_serve_real.py).
"""

from __future__ import annotations

import itertools

from ....policies.loader import PolicyError
from ...core.config import MODEL_BACKENDS, ConfigError, RunConfig
from ...engine.engine import Engine, Job
from .errors import ApiError
from .requests import CompletionRequest


class Jobs:
    """Submits requests as jobs on one engine, each with settings drawn from the server's defaults."""

    def __init__(self, engine: Engine, defaults: RunConfig) -> None:
        self.engine, self.defaults = engine, defaults
        self._numbers = itertools.count()

    def config(self, req: CompletionRequest, number: int) -> RunConfig:
        # a tokenizer without a chat template (sim) reads every prompt as it stands: no --raw-prompt there
        raw = self.defaults.backend in MODEL_BACKENDS
        if req.kind == "chat" and len(req.messages) == 1:
            prompts, raw = [req.messages[0]["content"]], False
        elif req.kind == "chat":
            prompts = [self.engine.tokenizer.chat_text(list(req.messages))]
        else:
            prompts = list(req.prompts)
        if len(prompts) > 1:  # one prompt per sequence: prompt i's n samples in a row
            prompts = [p for p in prompts for _ in range(req.n)]
        d = self.defaults
        settings = {"prompts": prompts, "raw_prompt": raw, "workers": req.sequences, "priorities": [],
                    "max_new_tokens": req.max_tokens or d.max_new_tokens,
                    "temperature": d.sampling.temperature if req.temperature is None else req.temperature,
                    "top_p": d.sampling.top_p if req.top_p is None else req.top_p,
                    "top_k": d.sampling.top_k if req.top_k is None else req.top_k,
                    # no seed given: a seed of its own (the server's --seed + the request's number), so two
                    # sampled requests differ while a restarted server replays the same draws
                    "seed": (d.seed + number) % (2**63) if req.seed is None else req.seed,
                    **req.extension.settings(req.sequences)}
        try:
            return d.replace(**settings)
        except ConfigError as exc:
            raise ApiError(400, f"the request's settings: {exc}", "specsched", "invalid_settings") from None

    def submit(self, req: CompletionRequest, on_name: str = "") -> tuple[Job, RunConfig]:
        """The job, running; ApiError 400 for settings the engine refuses (a prompt longer than the target
        reads, a tree too large ...), 503 once the engine cannot run jobs."""
        number = next(self._numbers)
        cfg = self.config(req, number)
        if self.engine.broken:
            raise ApiError(503, f"the engine cannot run jobs: {self.engine.broken}", None, "engine_down")
        try:
            job = self.engine.submit(config=cfg, priority=req.extension.priority,
                                     deadline_s=req.extension.deadline_s, name=on_name or f"request {number}")
        except (ConfigError, PolicyError) as exc:
            raise ApiError(400, str(exc), None, "invalid_settings") from None
        except RuntimeError as exc:  # closed, or the dispatcher stopped meanwhile
            raise ApiError(503, f"the engine cannot run jobs: {exc}", None, "engine_down") from None
        return job, cfg
