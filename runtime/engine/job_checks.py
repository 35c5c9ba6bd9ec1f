"""What a job must pass before it runs, and what makes a job's settings: bad input refused in one line
(ConfigError/PolicyError) before any of its processes starts.

The cheap checks (``JobChecks.check_plan``) come before the engine's zygote starts; the corpus cache, which
reads the target's tokenizer, once the model libraries are imported (``drafter_corpus``); the prompts'
lengths once the target's tokenizer is read (``loaded``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

from ...policies.loader import PolicyError, load_policy
from ..backends.backend import Backend
from ..core.config import PARTS, ConfigError, DrafterKind, RunConfig, known_settings
from ..core.config_checks import check_priority, is_int, is_number, shown
from ..models import corpus_cache

# the engine's own settings: the models it loads, how its processes talk, how it supervises them
ENGINE_FIELDS = ("backend", "target", "draft", "device", "dtype", "transport", "verifier_threads",
                 "sim_vocab", "sim_agreement", "sim_draft_ms", "sim_verify_ms", "max_restarts", "restart_period_s",
                 "heartbeat_timeout_s", "policy_timeout_s", "listen", "keys")


def with_settings(config: RunConfig | None, settings: dict, whose: str) -> RunConfig:
    """`config` (the defaults' if None) with keyword settings, each a RunConfig field: an Engine's or a job's."""
    if config is not None and not isinstance(config, RunConfig):
        raise ConfigError(f"config must be a RunConfig, got {shown(config)}")
    known = known_settings() | set(PARTS)
    if unknown := sorted(set(settings) - known):
        raise ConfigError(f"unknown {whose} setting {unknown[0]!r}: settings are RunConfig fields")
    return (config if config is not None else RunConfig()).replace(**settings)


def check_engine_options(max_workers, idle_timeout_s, refuse_overlong, planned) -> list[tuple[str, RunConfig]]:
    """Engine's own keywords (its RunConfig checks itself); returns `planned` as a list (it may be a generator)."""
    if not (is_int(max_workers) and max_workers >= 0):
        raise ConfigError(f"max_workers must be an int >= 0, got {shown(max_workers)}")
    if not (is_number(idle_timeout_s) and idle_timeout_s >= 0):  # NaN too: a worker would never retire
        raise ConfigError(f"idle_timeout_s must be seconds >= 0 (math.inf: never), got {shown(idle_timeout_s)}")
    if not isinstance(refuse_overlong, bool):
        raise ConfigError(f"refuse_overlong must be True or False, got {shown(refuse_overlong)}")
    pairs = None if isinstance(planned, str | bytes | Mapping) or not isinstance(planned, Iterable) else list(planned)
    if pairs is None or not all(isinstance(p, tuple | list) and len(p) == 2 and isinstance(p[0], str) and
                                isinstance(p[1], RunConfig) for p in pairs):
        raise ConfigError(f"planned must be a list of (name, RunConfig) pairs, got {shown(planned)}")
    return pairs


def check_job_options(priority, deadline_s, name, on_update) -> None:
    """What `submit` takes besides the job's settings; policies see the first three."""
    check_priority("priority", priority)
    check_deadline("deadline_s", deadline_s)
    if not isinstance(name, str):
        raise ConfigError(f"name must be a str, got {shown(name)}")
    if on_update is not None and not callable(on_update):
        raise ConfigError(f"on_update must be callable (it gets the job's Collected), got {shown(on_update)}")


def check_deadline(name: str, value) -> None:
    """A job's deadline: seconds after it arrives, finite (None: no deadline)."""
    if value is not None and not (is_number(value) and 0 < value < math.inf):
        raise ConfigError(f"{name} must be seconds > 0 after the job arrives, or None, got {shown(value)}")


class JobChecks:
    """The engine's checks of a job, against the engine's `config` (its models, the jobs' defaults), its
    `backend` and `max_workers`. Owns the corpus caches resolved so far (--corpus-cache setting -> what a job
    uses) and, once the models' libraries are imported, the target's tokenizer and context length."""

    def __init__(self, config: RunConfig, backend: Backend, max_workers: int) -> None:
        self.config, self.backend, self.max_workers = config, backend, max_workers
        self.corpus_caches: dict[str, str] = {}
        self.tokenizer = None
        self.context_length: int | None = None

    def loaded(self, tokenizer, context_length: int | None) -> None:
        """The target's tokenizer and positions: prompts can be encoded and measured from here on."""
        self.tokenizer, self.context_length = tokenizer, context_length

    def job_config(self, prompts, config: RunConfig | None, settings: dict) -> RunConfig:
        if isinstance(prompts, str):
            prompts = [prompts]
        elif prompts is not None and (isinstance(prompts, bytes | Mapping) or not isinstance(prompts, Iterable)):
            raise ConfigError(f"prompts must be a str or a list of str, got {shown(prompts)}")
        changes = dict(settings)
        if prompts is not None:
            changes["prompts"] = list(prompts)
        cfg = with_settings(config if config is not None else self.config, changes, "job")
        mine, asked = self.config.to_dict(), cfg.to_dict()
        for f in ENGINE_FIELDS:
            if asked[f] != mine[f]:
                raise ConfigError(f"this engine runs {f}={mine[f]!r}; a job cannot change it "
                                  f"(asked for {asked[f]!r}): start another Engine")
        return cfg

    def check_plan(self, cfg: RunConfig) -> None:
        """A policy that does not load, a mode the engine's draft cannot serve (dsbd on a feature draft), a corpus
        cache file that is not there, more draft workers than the engine runs."""
        load_policy(cfg.policy, cfg.supervision.policy_timeout_s)
        self.backend.check_mode(cfg.mode)
        if cfg.drafter != DrafterKind.MODEL and cfg.lanes.corpus_cache not in ("auto", "off"):
            corpus_cache.given_file(cfg.lanes.corpus_cache)
        if cfg.draft_workers > self.max_workers:
            raise ConfigError(f"the job needs {cfg.draft_workers} draft workers (--mode {cfg.mode}); this engine "
                              f"runs at most {self.max_workers}")

    def check_planned(self, name: str, cfg: RunConfig) -> None:
        """A job to come passes what `submit` will check; the error names it."""
        try:
            cfg = self.with_prompts(self.job_config(None, cfg, {}))
            self.check_plan(cfg)
            self.check_length(cfg, self.encode(cfg))
        except (ConfigError, PolicyError) as exc:
            raise type(exc)(f"{name}: {exc}") from None

    def with_prompts(self, cfg: RunConfig) -> RunConfig:
        """A job without prompts continues the backend's default prompt."""
        return cfg if cfg.prompts else dataclasses.replace(cfg, prompts=[self.backend.default_prompt()])

    def encode(self, cfg: RunConfig) -> list[list[int]]:
        return [self.tokenizer.encode(cfg.prompt_for(i), chat=not cfg.raw_prompt) for i in range(cfg.n_sequences)]

    def check_length(self, cfg: RunConfig, prompts: list[list[int]]) -> None:
        """Every sequence fits the target's positions: its prompt's tokens and the new tokens it may make (past
        them the target reads positions it never learnt, and its text stops meaning anything)."""
        limit = self.context_length
        if limit and (need := max(map(len, prompts)) + cfg.max_new_tokens) > limit:
            raise ConfigError(f"a {need - cfg.max_new_tokens}-token prompt and {cfg.max_new_tokens} new tokens need "
                              f"{need:,} positions; the target reads {limit:,} at most")

    def drafter_corpus(self, cfg: RunConfig) -> str:
        """The corpus cache the job's workers load: for Self-Draft, --corpus-cache resolved to a file or off
        (ConfigError for one that is missing or damaged); for the draft model, the setting as given."""
        given = cfg.lanes.corpus_cache
        return self._corpus_cache(given) if cfg.drafter != DrafterKind.MODEL else given

    def _corpus_cache(self, setting: str) -> str:
        """--corpus-cache resolved once per engine (it reads the target's tokenizer), not once per job."""
        if setting not in self.corpus_caches:
            self.corpus_caches[setting] = corpus_cache.resolve(setting, self.backend)
        return self.corpus_caches[setting]
