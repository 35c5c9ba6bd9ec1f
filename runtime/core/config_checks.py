"""The rules a run configuration must satisfy (RunConfig checks itself with them when it is made): each
refusal names the flag and the values it takes, in one line (ConfigError, exit status 2). Refused, not
ignored: a flag that cannot apply to the run asked for is an error, never silently dropped.
"""

from __future__ import annotations

import math
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
    TRANSPORTS,
    BackendKind,
    ConfigError,
    DrafterKind,
    Mode,
    TransportKind,
    TreeKind,
)

if TYPE_CHECKING:
    from .config import RunConfig

# Upper bounds: a value past them is a typo, and would otherwise overflow the wire (msgpack takes 64-bit
# integers), exhaust memory or run for days instead of failing in one line.
MAX_NEW_TOKENS = 1_000_000
MAX_K = 64                # a chain's draft tokens, and a --k-config tree's depth and widths (as --pct-depth)
MAX_TREE_NODES = 1024     # draft tokens one --k-config tree puts into one verification
MAX_SIM_VOCAB = 262_144   # the largest real vocabularies' size; the sim tokenizer holds a word per token
MAX_THREADS = 1024        # torch threads of one process: more hangs torch.set_num_threads, no machine has as many
MAX_SEED = 2**62          # a job's seed is --seed + its index, and every seed crosses the wire as a 64-bit integer
MAX_INT = 2**63 - 1       # a priority or a ticket count crosses the wire as a signed 64-bit integer
MAX_SEQUENCES = 10_000    # sequences of one job: each a prompt encoded and a state kept before any check
MAX_SIM_MS = 60_000       # a sim cost of more than a minute a step is a typo (and past ~1e11 s sleep() overflows)


def check(c: RunConfig) -> None:
    """Every flag of a run, checked once: the first one that is off raises a one-line ConfigError."""
    _check_types(c)
    if c.mode not in MODES:
        raise ConfigError(f"unknown --mode {c.mode!r}; choose one of {', '.join(MODES)}")
    if c.backend not in BACKENDS:
        raise ConfigError(f"unknown --backend {c.backend!r}; choose one of {', '.join(BACKENDS)}")
    if c.transport not in TRANSPORTS:
        raise ConfigError(f"unknown --transport {c.transport!r}; choose ipc or tcp")
    _check_listen(c)
    if not 1 <= c.k <= MAX_K:
        raise ConfigError(f"--k must be in 1..{MAX_K}, got {c.k}")
    if c.workers < 0:
        raise ConfigError(f"--workers must be at least 1, got {c.workers}")
    if c.workers > MAX_SEQUENCES or len(c.prompts) > MAX_SEQUENCES:
        raise ConfigError(f"a job has at most {MAX_SEQUENCES:,} sequences; got --workers {c.workers} and "
                          f"{len(c.prompts):,} prompts")
    if any(w < 1 for w in c.k_config):
        raise ConfigError(f"--k-config widths must be at least 1, got {c.k_config}")
    if len(c.k_config) > MAX_K or any(w > MAX_K for w in c.k_config) or tree_nodes(c.k_config) > MAX_TREE_NODES:
        raise ConfigError(f"--k-config {','.join(map(str, c.k_config))} drafts {tree_nodes(c.k_config)} tokens "
                          f"a round; at most {MAX_TREE_NODES}, {MAX_K} levels of at most {MAX_K} each")
    if not 0 <= c.min_confidence < 1:
        raise ConfigError(f"--min-confidence must be in [0, 1), got {c.min_confidence}")
    if c.lookup is not None and (c.lookup < 0 or c.lookup == 1):
        raise ConfigError(f"--lookup must be 0 (off) or at least 2, got {c.lookup}")
    if c.step_aside not in ("on", "off"):
        raise ConfigError(f"--step-aside must be on or off, got {c.step_aside!r}")
    if c.step_aside == "on" and c.mode not in (Mode.SEED, Mode.SD):
        raise ConfigError(f"--step-aside needs draft workers (--mode seed or sd); --mode {c.mode} has none")
    if c.tree not in (TreeKind.FIXED, TreeKind.PCT):
        raise ConfigError(f"unknown --tree {c.tree!r}; choose fixed or pct")
    if c.tree == TreeKind.PCT and c.k_config:
        raise ConfigError("--tree pct shapes the tree itself: drop --k-config")
    if not (1 <= c.pct_top_k <= 64 and 1 <= c.pct_depth <= 64):
        raise ConfigError(f"--pct-top-k and --pct-depth must be in 1..64, got {c.pct_top_k}, "
                          f"{c.pct_depth}")
    if not 0 < c.pct_floor < 1:
        raise ConfigError(f"--pct-floor must be in (0, 1), got {c.pct_floor}")
    if c.max_batch < 0:
        raise ConfigError(f"--max-batch must be >= 0 (0 = every ready draft), got {c.max_batch}")
    if c.lockstep and c.mode in (Mode.AR, Mode.PARALLEL):
        # refused, not ignored: these target-only modes have no drafts to hold back
        raise ConfigError(f"--lockstep needs draft workers (--mode seed or sd); --mode {c.mode} has none")
    _check_beams(c)
    _check_supervision(c)
    _check_branches(c)
    if not 1 <= c.max_new_tokens <= MAX_NEW_TOKENS:
        raise ConfigError(f"--max-new-tokens must be in 1..{MAX_NEW_TOKENS:,}, got {c.max_new_tokens}")
    if not 0 <= c.sim_agreement <= 1:
        raise ConfigError(f"--sim-agreement must be in [0, 1], got {c.sim_agreement}")
    if not 4 <= c.sim_vocab <= MAX_SIM_VOCAB:
        raise ConfigError(f"--sim-vocab must be in 4..{MAX_SIM_VOCAB:,}, got {c.sim_vocab}")
    _check_models(c)
    for flag, ms in (("--sim-draft-ms", c.sim_draft_ms), ("--sim-verify-ms", c.sim_verify_ms)):
        if not 0 <= ms <= MAX_SIM_MS:
            raise ConfigError(f"{flag} must be in [0, {MAX_SIM_MS:,}] ms, got {ms}")
    if not 0 <= c.verifier_threads <= MAX_THREADS:
        raise ConfigError(f"--verifier-threads must be in 0..{MAX_THREADS:,} (0 = all cores), got {c.verifier_threads}")
    if not 0 <= c.seed <= MAX_SEED:
        raise ConfigError(f"--seed must be in 0..{MAX_SEED:,}, got {c.seed}")
    if not math.isfinite(c.temperature):
        raise ConfigError(f"--temperature must be a finite number, got {c.temperature}")
    if any(not p.strip() for p in c.prompts):
        raise ConfigError("a --prompt is empty: give the text to continue")
    for p in c.prompts:
        if why := not_utf8(p):
            raise ConfigError(f"a --prompt {why}")
    try:
        c.sampling  # noqa: B018 - validates temperature / top-k / top-p
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
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


# What each annotation of a RunConfig field takes (its values cross to the children as JSON and msgpack, so
# a numpy scalar, a bool for a number or a string for a list is refused here, not by a child's traceback).
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


def _check_types(c: RunConfig) -> None:
    for f in fields(c):
        accepts, what = _TYPES[f.type]
        value = getattr(c, f.name)
        if not accepts(value):
            raise ConfigError(f"{f.name} must be {what}, got {shown(value)}")


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

def _check_listen(c: RunConfig) -> None:
    if c.keys is not None and not c.keys.strip():  # it read as "not given": keys made for this run, in silence
        raise ConfigError("--keys is empty; give engine.key or its directory (`specsched keys DIR`), or None")
    if (c.listen or c.keys) and c.transport != TransportKind.TCP:
        raise ConfigError(f"{'--listen' if c.listen else '--keys'} needs --transport tcp")
    if c.listen is None:
        return
    if not c.keys:
        raise ConfigError("--listen needs --keys DIR: a worker on another host must hold the run's key "
                          "(make them with `specsched keys DIR`)")
    host, _, port = c.listen.rpartition(":")
    if "://" in c.listen or "[" in host:  # the worker's --connect form, or IPv6 (the engine binds IPv4)
        raise ConfigError(f"--listen takes HOST:PORT with an IPv4 address or a name, no scheme (e.g. 0.0.0.0:5555), "
                          f"got {c.listen!r}")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"--listen takes HOST:PORT (an address of this machine and a port 1..65535), "
                          f"got {c.listen!r}")

def _check_branches(c: RunConfig) -> None:
    if c.drafter not in DRAFTERS:
        raise ConfigError(f"unknown --drafter {c.drafter!r}; choose one of {', '.join(DRAFTERS)}")
    if c.drafter != DrafterKind.MODEL and c.mode not in (Mode.SEED, Mode.SD):
        raise ConfigError(f"--drafter {c.drafter} needs draft workers (--mode seed or sd), "
                          f"not --mode {c.mode}")
    if not 0 <= c.branches <= 64:
        raise ConfigError(f"--branches must be in 0..64, got {c.branches}")
    if c.branch_processes and (c.drafter == DrafterKind.MODEL or not c.branches):
        raise ConfigError("--branch-processes needs branch lanes: --drafter branches or both, --branches >= 1")
    if not 4 <= c.branch_length <= 64:  # a lane yields 4-grams (key + 3 tokens + prediction) from L = 4 on
        raise ConfigError(f"--branch-length must be in 4..64, got {c.branch_length}")

def _check_beams(c: RunConfig) -> None:
    for flag, value, lo, hi in (("--beams", c.beams, 1, 64), ("--draft-beams", c.draft_beams, 0, 256),
                                ("--gamma", c.gamma, 1, 16), ("--min-beams", c.min_beams, 1, c.beams)):
        if not lo <= value <= hi:
            raise ConfigError(f"{flag} must be in {lo}..{'--beams' if flag == '--min-beams' else hi}, got {value}")
    if c.beam_input not in ("all", "best"):
        raise ConfigError(f"--beam-input must be all or best, got {c.beam_input!r}")
    if not 0 <= c.beam_threshold <= 1:
        raise ConfigError(f"--beam-threshold must be in [0, 1], got {c.beam_threshold}")
    if c.mode in BEAM_MODES and (c.lockstep or c.tree != TreeKind.FIXED or c.k_config):
        raise ConfigError(f"--mode {c.mode} drafts beam forests: --lockstep, --tree and --k-config do not apply")
    if c.beam_threshold and c.temperature == 0:
        raise ConfigError("--beam-threshold (a dynamic width) needs sampling: beam search at --temperature 0 "
                          "keeps a fixed width")
    if c.mode in BEAM_MODES and c.coupling != "residual":
        raise ConfigError(f"--coupling {c.coupling} is for chains and trees: --mode {c.mode} samples beams jointly")


def _check_supervision(c: RunConfig) -> None:
    if not 0 <= c.max_restarts <= 1000:
        raise ConfigError(f"--max-restarts must be in 0..1000, got {c.max_restarts}")
    if not 0 < c.restart_period_s <= 86400:
        raise ConfigError(f"--restart-period must be in (0, 86400] seconds, got {c.restart_period_s}")
    if not 0 < c.heartbeat_timeout_s <= 3600:
        raise ConfigError(f"--heartbeat-timeout must be in (0, 3600] seconds, got {c.heartbeat_timeout_s}")
    if not 0 < c.policy_timeout_s <= 3600:
        raise ConfigError(f"--policy-timeout must be in (0, 3600] seconds, got {c.policy_timeout_s}")
    if not 0 < c.verdict_timeout_s <= 3600:
        raise ConfigError(f"--verdict-timeout must be in (0, 3600] seconds, got {c.verdict_timeout_s}")
