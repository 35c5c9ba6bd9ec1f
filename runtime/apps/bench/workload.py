"""What every arm decodes: the prompts of one benchmark workload, the same for every arm and every repeat.

On the hf backend the prompts are held-out Tree-of-Thoughts-style prompts (never seen in distillation),
optionally from one task family; on the sim backend, whose tokenizer only hashes words, short fixed
strings do. ``n`` thoughts decode ``n`` sequences: one prompt per thought by default (the SEED paper's
state evaluation), or one prompt shared by all of them (thought generation, c1 = c2 = ... = cn).
"""

from __future__ import annotations

from ...core.config import BackendKind, ConfigError
from ..drafts.training import prompts as heldout

# ToT task -> the held-out prompt family of specsched.runtime.apps.drafts.training.prompts it draws from.
TASKS = {"gsm8k": "math", "creative": "passage", "blocksworld": "blocks"}
_SIM_WORDS = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi"]


def prompts(backend: str, n_prompts: int, *, task: str | None = None, seed: int = 1) -> list[str]:
    """``n_prompts`` prompts: a prefix of one fixed list, so a larger workload extends a smaller one."""
    if n_prompts < 1:
        raise ConfigError(f"--prompts must be at least 1, got {n_prompts}")
    if task is not None and task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if backend == BackendKind.SIM:
        if task is not None:
            raise ConfigError("ToT task prompts need real models: use --backend hf with --task / --sweep task")
        return [_sim_prompt(i) for i in range(n_prompts)]

    if task is None:
        return heldout.heldout_prompts(n_prompts, seed=seed)
    return heldout.heldout_family(n_prompts, TASKS[task], seed=seed)


def _sim_prompt(i: int) -> str:
    # three pseudo-words, different for every i < 512: distinct sequences for the sim models
    w = _SIM_WORDS
    return f"{w[i % 8]}{w[i // 8 % 8]} {w[i // 64 % 8]}{w[(i + 3) % 8]} {w[(i + 5) % 8]}{w[i % 7]}"


def per_thought(texts: list[str], thoughts: int) -> list[str]:
    """The run's prompt list: one prompt shared by every thought, or exactly one per thought."""
    if len(texts) not in (1, thoughts):
        raise ConfigError(f"--prompts {len(texts)} with {thoughts} thoughts: give 1 (shared by every thought) "
                          f"or {thoughts} (one per thought)")
    return list(texts)
