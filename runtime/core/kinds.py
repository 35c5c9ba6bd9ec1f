"""The kinds a run is made of (mode, backend, drafter, tree, transport) and the error for bad input: the names
config.py, its checks (config_checks.py) and the device's resolution (device.py) share.
"""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """What a run decodes with (`--mode`); a member equals its name, so `config.mode == Mode.SEED`."""
    AR = "ar"              # the target alone, one sequence after another
    SD = "sd"              # classic speculative decoding: one draft worker serves every sequence in turn
    SEED = "seed"          # SEED: a draft worker per sequence, one verifier scheduling them
    PARALLEL = "parallel"  # the target alone, every sequence in one batched forward
    BEAM = "beam"          # beam sampling / search with the target alone
    DSBD = "dsbd"          # dynamic-width speculative beam decoding: a draft worker per beam


class BackendKind(StrEnum):
    """What runs the models (`--backend`)."""
    SIM = "sim"            # a simulated pair: no model, fixed costs (teaching, fast tests)
    HF = "hf"              # transformers (CPU or CUDA)
    LLAMACPP = "llamacpp"  # a llama.cpp verifier (GGUF) with torch drafts


class DrafterKind(StrEnum):
    """Where draft tokens come from (`--drafter`, workers/branch_drafter.py)."""
    MODEL = "model"        # the draft model
    BRANCHES = "branches"  # Self-Draft's lanes and caches, no draft model
    BOTH = "both"


class TreeKind(StrEnum):
    """The shape of a draft (`--tree`)."""
    FIXED = "fixed"        # a chain of --k tokens, or the --k-config tree
    PCT = "pct"            # shaped by expected time gain (workers/pct.py)


class TransportKind(StrEnum):
    """How the processes of a run talk (`--transport`)."""
    IPC = "ipc"            # Unix sockets in a private directory
    TCP = "tcp"            # loopback or network ports, CurveZMQ


MODES = tuple(m.value for m in Mode)
BEAM_MODES = (Mode.BEAM, Mode.DSBD)  # beam sampling / search: target only, and with one draft worker per beam
BACKENDS = tuple(b.value for b in BackendKind)
MODEL_BACKENDS = (BackendKind.HF, BackendKind.LLAMACPP)  # real models, a transformers tokenizer and torch drafts
TRANSPORTS = tuple(t.value for t in TransportKind)
DRAFTERS = tuple(d.value for d in DrafterKind)


class ConfigError(ValueError):
    """Bad user input: reported as one line, exit status 2."""
