"""The per-request fields beyond OpenAI's, in one namespaced object: `"specsched": {...}` (docs/serve.md).

What the policy sees (priority, tickets, deadline) and how the request is drafted (k, a tree, the drafter, or
none: the target alone). A request cannot change what the engine was started with (its models, the policy,
the transport): those fields are refused with a 400 that names the flag, not ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...core.config import DRAFTERS, Mode, TreeKind
from ...core.config_checks import MAX_K, is_int, is_number
from .errors import bad, wrong_type

NAME = "specsched"
TARGET_ONLY = "none"           # "drafter": "none" decodes with the target alone
MAX_TICKETS = 1_000_000
MAX_DEADLINE_S = 86_400.0      # as a workload's arrivals: a deadline a day away is a typo
# fields a job cannot change on a running engine, and the server flag that sets each
ENGINE_OWNED = {"policy": "--policy", "target": "--target", "draft": "--draft", "backend": "--backend",
                "device": "--device", "dtype": "--dtype", "transport": "--transport", "coupling": "--coupling",
                "mode": "--mode (or drafter: none for the target alone)"}
FIELDS = ("priority", "tickets", "deadline_s", "k", "k_config", "tree", "drafter")


@dataclass(slots=True, frozen=True)
class Extension:
    priority: int = 0                  # lower = more urgent (the priority policy, edf's ties, ...)
    tickets: int | None = None         # lottery / stride shares (100 unless given)
    deadline_s: float | None = None    # seconds after the request arrives (edf, goodput)
    k: int | None = None               # draft tokens per round
    k_config: tuple[int, ...] | None = None  # a draft tree: candidates per depth
    tree: str | None = None            # fixed | pct
    drafter: str | None = None         # model | branches | both | none

    def settings(self, sequences: int) -> dict:
        """The job's RunConfig fields that differ from the server's defaults."""
        out: dict = {}
        if self.tickets is not None:
            out["tickets"] = [self.tickets]
        for name in ("k", "tree"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.k_config is not None:
            out["k_config"] = list(self.k_config)
        if self.drafter == TARGET_ONLY:  # several sequences share one batched forward; one is plain AR
            out["mode"] = Mode.PARALLEL if sequences > 1 else Mode.AR
        elif self.drafter is not None:
            out["drafter"] = self.drafter
        return out


def parse_extension(value) -> Extension:
    """The `specsched` object of a request (absent: every default). Raises ApiError (400) naming the field."""
    if value is None:
        return Extension()
    if not isinstance(value, dict):
        raise wrong_type(NAME, "an object", value)
    for key in value:
        if key in ENGINE_OWNED:
            raise bad(f"{NAME}.{key}", f"set by the server's {ENGINE_OWNED[key]}; a request cannot change it on "
                                       "a running engine", "engine_setting")
        if key not in FIELDS:
            raise bad(f"{NAME}.{key}", f"unknown extension field (known: {', '.join(FIELDS)})", "unknown_field")
    v = value.get
    return Extension(priority=_int(v("priority", 0), "priority", -(2**63), 2**63 - 1),
                     tickets=None if v("tickets") is None else _int(v("tickets"), "tickets", 1, MAX_TICKETS),
                     deadline_s=_deadline(v("deadline_s")),
                     k=None if v("k") is None else _int(v("k"), "k", 1, MAX_K),
                     k_config=_tree_shape(v("k_config")),
                     tree=_choice(v("tree"), "tree", tuple(t.value for t in TreeKind)),
                     drafter=_choice(v("drafter"), "drafter", (*DRAFTERS, TARGET_ONLY)))


def _int(value, name: str, low: int, high: int) -> int:
    if not is_int(value):
        raise wrong_type(f"{NAME}.{name}", "an integer", value)
    if not low <= value <= high:
        raise bad(f"{NAME}.{name}", f"must be in {low}..{high}, got {value}")
    return value


def _deadline(value) -> float | None:
    if value is None:
        return None
    if not is_number(value):
        raise wrong_type(f"{NAME}.deadline_s", "seconds (a number)", value)
    if not (0 < value <= MAX_DEADLINE_S and math.isfinite(value)):
        raise bad(f"{NAME}.deadline_s", f"must be seconds in (0, {MAX_DEADLINE_S:g}] after the request, got {value}")
    return float(value)


def _tree_shape(value) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or len(value) > MAX_K:
        raise wrong_type(f"{NAME}.k_config", f"a list of 1..{MAX_K} integers (candidates per depth)", value)
    return tuple(_int(w, "k_config", 1, MAX_K) for w in value)


def _choice(value, name: str, choices: tuple[str, ...]) -> str | None:
    if value is None:
        return None
    if value not in choices or not isinstance(value, str):
        raise bad(f"{NAME}.{name}", f"one of {', '.join(choices)}, got {value!r:.80}")
    return value
