"""Resolve ``--policy`` to a Policy class: a built-in name, ``file.py:Class``, ``module:Class``, or a
name registered under the entry-point group ``specsched.policies``."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from importlib.metadata import entry_points
from pathlib import Path

from ..runtime.core.deadline import Overrun, policy_call
from .base import Policy
from .batch import Batch
from .cfs import CFS
from .commit_first import CommitFirst
from .edf import EDF
from .fcfs import FCFS
from .goodput import Goodput
from .lottery import Lottery
from .mlfq import MLFQ
from .priority import Priority
from .rr import RoundRobin
from .sjf import SJF
from .srtf import SRTF
from .stride import Stride

BUILTIN: dict[str, type[Policy]] = {
    "fcfs": FCFS, "priority": Priority, "rr": RoundRobin, "batch": Batch,              # the first four
    "sjf": SJF, "srtf": SRTF, "mlfq": MLFQ, "lottery": Lottery, "stride": Stride,      # the textbook's
    "edf": EDF, "cfs": CFS,
    "goodput": Goodput,                                                                 # cost-aware batching
    "commit-first": CommitFirst,                                                        # Self-Draft's kinds
}
GROUP = "specsched.policies"


class PolicyError(ValueError):
    """A --policy that cannot be loaded: reported as one line."""


def load_policy(spec: str, timeout_s: float = 0.0) -> type[Policy]:
    """The class `spec` names. A plug-in's module is user code run at import: with `timeout_s` > 0 (the run's
    --policy-timeout) an import that does not return in time is stopped, as its pick would be."""
    return policy_call(spec, "its import", timeout_s, _load, spec, error=PolicyError, passes=(PolicyError,))


def _load(spec: str) -> type[Policy]:
    if spec in BUILTIN:
        return BUILTIN[spec]
    if ":" in spec:
        where, _, cls_name = spec.rpartition(":")
        if not where:
            raise PolicyError(f"policy {spec!r}: the module part before ':' is empty; "
                              "give path/to/file.py:ClassName or package.module:ClassName")
        if not cls_name:
            raise PolicyError(f"policy {spec!r}: the class name after ':' is empty")
        module = _from_file(where) if where.endswith(".py") else _from_module(where)
        cls = getattr(module, cls_name, None)
        if cls is None:
            raise PolicyError(f"policy class {cls_name!r} not found in {where}")
        return _checked(cls, spec)
    plugins = {ep.name: ep for ep in entry_points(group=GROUP)}
    if spec in plugins:
        ep = plugins[spec]
        return _checked(_guarded(ep.load, f"policy {spec!r} (entry point {ep.value}) failed to load"), spec)
    names = sorted(set(BUILTIN) | set(plugins))
    raise PolicyError(f"unknown policy {spec!r}; built-in and installed: {', '.join(names)}; "
                      "or give path/to/file.py:ClassName or package.module:ClassName")


def _from_file(path: str):
    file = Path(path)
    if not file.is_file():
        raise PolicyError(f"policy file not found: {path}")
    spec = importlib.util.spec_from_file_location(f"specsched_user_policy_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise PolicyError(f"cannot import policy file {path}")
    module = importlib.util.module_from_spec(spec)
    _guarded(lambda: spec.loader.exec_module(module), f"policy file {path} failed to import")
    return module


def _from_module(name: str):
    def load():
        try:
            # lazy: optional dependency: the module a user names in --policy, known only when the run asks for it
            return importlib.import_module(name)
        except ImportError as exc:
            raise PolicyError(f"cannot import policy module {name!r}: {exc}") from None

    return _guarded(load, f"policy module {name!r} failed to import")


def _guarded(load, what: str):
    """Run user code that loads a policy. Whatever it raises - SystemExit included, which would
    otherwise end the CLI silently with the policy's own exit code - becomes one PolicyError line;
    only Ctrl-C passes through."""
    try:
        return load()
    except (KeyboardInterrupt, PolicyError, Overrun):
        raise
    except BaseException as exc:  # user code: anything it raises is bad input
        text = " ".join(str(exc).split())
        raise PolicyError(f"{what}: {type(exc).__name__}" + (f": {text}" if text else "")) from None


def _checked(cls: object, spec: str) -> type[Policy]:
    if not (inspect.isclass(cls) and issubclass(cls, Policy)):
        raise PolicyError(f"{spec} is not a subclass of specsched.policies.Policy")
    if inspect.isabstract(cls):
        raise PolicyError(f"{spec} does not implement pick()")
    return cls
