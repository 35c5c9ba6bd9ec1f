"""The rules a run configuration must satisfy: the run's own flags and the rules between its parts
(config_parts.py: each part checks its own values), and what every part shares (types, bounds). Each refusal
names the flag and the values it takes, in one line (ConfigError, exit status 2). Refused, not ignored: a
flag that cannot apply to the run asked for is an error, never silently dropped.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING

from .device import DTYPES, check_device
from .kinds import (
    BACKENDS,
    BEAM_MODES,
    DRAFTERS,
    MODES,
    BackendKind,
    ConfigError,
    DrafterKind,
    Mode,
    TreeKind,
)

if TYPE_CHECKING:
    from .config import RunConfig

# Upper bounds: a value past them is a typo, and would otherwise overflow the wire (msgpack takes 64-bit
# integers), exhaust memory or run for days instead of failing in one line.
MAX_NEW_TOKENS = 1_000_000
MAX_K = 64                # a chain's draft tokens, and a --k-config tree's depth and widths (as --pct-depth)
MAX_TREE_NODES = 1024     # draft tokens one --k-config tree puts into one verification
MAX_THREADS = 1024        # torch threads of one process: more hangs torch.set_num_threads, no machine has as many
MAX_SEED = 2**62          # a job's seed is --seed + its index, and every seed crosses the wire as a 64-bit integer
MAX_INT = 2**63 - 1       # a priority or a ticket count crosses the wire as a signed 64-bit integer
MAX_SEQUENCES = 10_000    # sequences of one job: each a prompt encoded and a state kept before any check


def check(c: RunConfig) -> None:
    """The run's own flags and the rules between its parts (each part checked its own values when it was
    made): the first one that is off raises a one-line ConfigError."""
    check_types(c)
    if c.mode not in MODES:
        raise ConfigError(f"unknown --mode {c.mode!r}; choose one of {', '.join(MODES)}")
    if c.backend not in BACKENDS:
        raise ConfigError(f"unknown --backend {c.backend!r}; choose one of {', '.join(BACKENDS)}")
    if c.workers < 0:
        raise ConfigError(f"--workers must be at least 1, got {c.workers}")
    if c.workers > MAX_SEQUENCES or len(c.prompts) > MAX_SEQUENCES:
        raise ConfigError(f"a job has at most {MAX_SEQUENCES:,} sequences; got --workers {c.workers} and "
                          f"{len(c.prompts):,} prompts")
    if c.step_aside not in ("on", "off"):
        raise ConfigError(f"--step-aside must be on or off, got {c.step_aside!r}")
    if c.step_aside == "on" and c.mode not in (Mode.SEED, Mode.SD):
        raise ConfigError(f"--step-aside needs draft workers (--mode seed or sd); --mode {c.mode} has none")
    if c.max_batch < 0:
        raise ConfigError(f"--max-batch must be >= 0 (0 = every ready draft), got {c.max_batch}")
    if c.lockstep and c.mode in (Mode.AR, Mode.PARALLEL):
        # refused, not ignored: these target-only modes have no drafts to hold back
        raise ConfigError(f"--lockstep needs draft workers (--mode seed or sd); --mode {c.mode} has none")
    _check_beams(c)
    _check_branches(c)
    if not 1 <= c.max_new_tokens <= MAX_NEW_TOKENS:
        raise ConfigError(f"--max-new-tokens must be in 1..{MAX_NEW_TOKENS:,}, got {c.max_new_tokens}")
    _check_models(c)
    if not 0 <= c.verifier_threads <= MAX_THREADS:
        raise ConfigError(f"--verifier-threads must be in 0..{MAX_THREADS:,} (0 = all cores), got {c.verifier_threads}")
    if not 0 <= c.seed <= MAX_SEED:
        raise ConfigError(f"--seed must be in 0..{MAX_SEED:,}, got {c.seed}")
    _check_prompts(c)


def _check_prompts(c: RunConfig) -> None:
    """The prompts, and the per-worker lists (--priorities, --tickets) that must match their number."""
    if any(not p.strip() for p in c.prompts):
        raise ConfigError("a --prompt is empty: give the text to continue")
    for p in c.prompts:
        if why := not_utf8(p):
            raise ConfigError(f"a --prompt {why}")
    n = c.n_sequences
    if len(c.prompts) > 1 and c.workers and c.workers != len(c.prompts):
        raise ConfigError(f"{len(c.prompts)} prompts but --workers {c.workers}: give one prompt "
                          "(shared by every worker) or one per worker")
    if c.priorities and len(c.priorities) not in (1, n):
        raise ConfigError(f"--priorities needs 1 or {n} values, got {len(c.priorities)}")
    for p in c.priorities:
        check_priority("--priorities", p)
    if c.tickets and (len(c.tickets) not in (1, n) or not all(1 <= t <= MAX_INT for t in c.tickets)):
        raise ConfigError(f"--tickets needs 1 or {n} values, each in 1..2**63-1, got {c.tickets}")


def check_priority(name: str, value) -> None:
    """A priority - a job's (`submit(priority=)`) or a worker's (--priorities) - is an integer that fits the wire."""
    if not is_int(value) or not -MAX_INT - 1 <= value <= MAX_INT:
        raise ConfigError(f"{name} must be an integer in -2**63..2**63-1 (lower = more urgent), got {shown(value)}")


def not_utf8(text: str) -> str | None:
    """Why a prompt cannot be tokenized, or None: it must be UTF-8 text. Bytes that are not UTF-8 reach Python
    as lone surrogates (argv's surrogateescape turns byte 0xff into U+DCFF; JSON's "\\udcff" makes one too),
    and no tokenizer encodes those."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        return f"is not UTF-8 text ({what} at character {exc.start + 1})"
    return None


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int to Python, and no count


def is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# What each annotation of a configuration's field takes (its values cross to the children as JSON and msgpack,
# so a numpy scalar, a bool for a number or a string for a list is refused here, not by a child's traceback).
_TYPES: dict[str, tuple[Callable[[object], bool], str]] = {
    "int": (is_int, "an int"),
    "int | None": (lambda v: v is None or is_int(v), "an int or None"),
    "float": (is_number, "a number"),
    "bool": (lambda v: isinstance(v, bool), "True or False"),
    "str": (lambda v: isinstance(v, str), "a str"),
    "str | None": (lambda v: v is None or isinstance(v, str), "a str or None"),
    "list[int]": (lambda v: isinstance(v, list | tuple) and all(map(is_int, v)), "a list of ints"),
    "list[str]": (lambda v: isinstance(v, list | tuple) and all(isinstance(x, str) for x in v), "a list of str"),
}


def check_types(part) -> None:
    """Every field of a configuration (RunConfig or one of its parts) holds what its annotation says; a part
    is checked by its own class (it was made before). A refusal names the setting as the user wrote it:
    the flat name (`sim_vocab`, not `vocab`), from the part's FLAGS."""
    flat = {leaf: name for name, leaf in getattr(part, "FLAGS", {}).items()}
    for f in fields(part):
        value = getattr(part, f.name)
        if f.type not in _TYPES:  # a part: a dataclass of its own
            if type(value).__name__ != f.type:
                raise ConfigError(f"{f.name} must be a {f.type}, got {shown(value)}")
            continue
        accepts, what = _TYPES[f.type]
        if not accepts(value):
            raise ConfigError(f"{flat.get(f.name, f.name)} must be {what}, got {shown(value)}")


def shown(value) -> str:
    """A value as an error line names it: short, with its type (a str "3" and an int 3 look alike)."""
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"{reprlib.repr(value)} ({name})"


def tree_nodes(widths: Sequence[int]) -> int:
    """Draft tokens of a tree of widths w1, w2, ...: w1 + w1*w2 + ... (every node of a level has the next
    width's children); a chain of k tokens is widths (1,) * k."""
    total, level = 0, 1
    for w in widths:
        level *= w
        total += level
    return total


def _check_models(c: RunConfig) -> None:
    """Which models, where and in what precision (--target, --draft, --raw-prompt, --device, --dtype): sim has none."""
    if c.dtype not in DTYPES:
        raise ConfigError(f"unknown --dtype {c.dtype!r}; choose auto, fp32, bf16 or fp16")
    check_device(c.device)
    for flag, name in (("--target", c.target), ("--draft", c.draft)):
        if name is not None and not name.strip():  # it read as "not given": the default pair, in silence
            raise ConfigError(f"{flag} is empty; give a preset (`specsched models list`), a model directory or a "
                              "cached id")
    if c.backend == BackendKind.SIM:  # refused, not ignored: sim has no models to choose, load, prompt or place
        for flag, given in (("--target", c.target), ("--draft", c.draft), ("--raw-prompt", c.raw_prompt),
                            ("--dtype", c.dtype not in ("auto", "fp32"))):
            if given:
                raise ConfigError(f"{flag} applies to --backend hf or llamacpp (this run uses --backend sim)")
        if c.device != "auto":
            raise ConfigError("--device applies to --backend hf (this run uses --backend sim)")
    if c.device.startswith("cuda") and c.backend == BackendKind.LLAMACPP:
        raise ConfigError(f"--device {c.device}: the llamacpp backend runs on the CPU; use --backend hf "
                          "for CUDA, or --device cpu")


def _check_branches(c: RunConfig) -> None:
    """--drafter, and Self-Draft's lanes against it."""
    if c.drafter not in DRAFTERS:
        raise ConfigError(f"unknown --drafter {c.drafter!r}; choose one of {', '.join(DRAFTERS)}")
    if c.drafter != DrafterKind.MODEL and c.mode not in (Mode.SEED, Mode.SD):
        raise ConfigError(f"--drafter {c.drafter} needs draft workers (--mode seed or sd), "
                          f"not --mode {c.mode}")
    if c.lanes.processes and (c.drafter == DrafterKind.MODEL or not c.lanes.count):
        raise ConfigError("--branch-processes needs branch lanes: --drafter branches or both, --branches >= 1")


def _check_beams(c: RunConfig) -> None:
    """What beam modes cannot take from the other parts: chains' and trees' flags, greedy dynamic widths."""
    if c.mode in BEAM_MODES and (c.lockstep or c.shape.tree != TreeKind.FIXED or c.shape.k_config):
        raise ConfigError(f"--mode {c.mode} drafts beam forests: --lockstep, --tree and --k-config do not apply")
    if c.beam.threshold and c.sampling.temperature == 0:
        raise ConfigError("--beam-threshold (a dynamic width) needs sampling: beam search at --temperature 0 "
                          "keeps a fixed width")
    if c.mode in BEAM_MODES and c.sampling.coupling != "residual":
        raise ConfigError(f"--coupling {c.sampling.coupling} is for chains and trees: --mode {c.mode} samples "
                          "beams jointly")
