"""What a job must pass before it runs, and what makes a job's settings: bad input refused in one line
(ConfigError/PolicyError) before any of its processes starts. A mixin of the Engine: it reads the engine's
settings, its backend and its resolved corpus caches.

The cheap checks (``_check_plan``) come before the engine's zygote starts; the corpus cache, which reads
the target's tokenizer, once the model libraries are imported (``_drafter_corpus``).
"""

from __future__ import annotations

import dataclasses

from specsched.policies.loader import load_policy
from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.models import corpus_cache

# the engine's own settings: the models it loads, how its processes talk, how it supervises them
ENGINE_FIELDS = ("backend", "target", "draft", "device", "dtype", "transport", "verifier_threads",
                 "sim_vocab", "sim_agreement", "sim_draft_ms", "sim_verify_ms", "max_restarts", "restart_period_s",
                 "heartbeat_timeout_s", "policy_timeout_s", "listen", "keys")


class JobChecks:
    def _job_config(self, prompts, config: RunConfig | None, settings: dict) -> RunConfig:
        if isinstance(prompts, str):
            prompts = [prompts]
        cfg = config if config is not None else self.config
        changes = dict(settings)
        if prompts is not None:
            changes["prompts"] = list(prompts)
        try:
            cfg = dataclasses.replace(cfg, **changes)
        except TypeError as exc:
            raise ConfigError(f"unknown job setting: {exc}") from None
        for f in ENGINE_FIELDS:
            if getattr(cfg, f) != getattr(self.config, f):
                raise ConfigError(f"this engine runs {f}={getattr(self.config, f)!r}; a job cannot change it "
                                  f"(asked for {getattr(cfg, f)!r}): start another Engine")
        return cfg

    def _check_plan(self, cfg: RunConfig) -> None:
        """A policy that does not load, a corpus cache file that is not there, more draft workers than the
        engine runs."""
        load_policy(cfg.policy)
        if cfg.drafter != "model" and cfg.corpus_cache not in ("auto", "off"):
            corpus_cache.given_file(cfg.corpus_cache)
        if cfg.draft_workers > self.max_workers:
            raise ConfigError(f"the job needs {cfg.draft_workers} draft workers (--mode {cfg.mode}); this engine "
                              f"runs at most {self.max_workers}")

    def _check_planned(self, name: str, cfg: RunConfig) -> None:
        """A job to come fits the target's positions (what `submit` will refuse); the error names it."""
        try:
            self._check_length(cfg, self._encode(cfg))
        except ConfigError as exc:
            raise ConfigError(f"{name}: {exc}") from None

    def _encode(self, cfg: RunConfig) -> list[list[int]]:
        return [self.tokenizer.encode(cfg.prompt_for(i), chat=not cfg.raw_prompt) for i in range(cfg.n_sequences)]

    def _check_length(self, cfg: RunConfig, prompts: list[list[int]]) -> None:
        """Every sequence fits the target's positions: its prompt's tokens and the new tokens it may make (past
        them the target reads positions it never learnt, and its text stops meaning anything)."""
        limit = self._context_length
        if limit and (need := max(map(len, prompts)) + cfg.max_new_tokens) > limit:
            raise ConfigError(f"a {need - cfg.max_new_tokens}-token prompt and {cfg.max_new_tokens} new tokens need "
                              f"{need:,} positions; the target reads {limit:,} at most")

    def _drafter_corpus(self, cfg: RunConfig) -> str:
        """The corpus cache the job's workers load: for Self-Draft, --corpus-cache resolved to a file or off
        (ConfigError for one that is missing or damaged); for the draft model, the setting as given."""
        return self._corpus_cache(cfg.corpus_cache) if cfg.drafter != "model" else cfg.corpus_cache

    def _corpus_cache(self, setting: str) -> str:
        """--corpus-cache resolved once per engine (it reads the target's tokenizer), not once per job."""
        if setting not in self._corpus_caches:
            self._corpus_caches[setting] = corpus_cache.resolve(setting, self._backend)
        return self._corpus_caches[setting]
