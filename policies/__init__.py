"""Scheduling policies: what the verifier verifies next. See ``base.py`` for the contract."""

from .base import Policy, PolicySettings, ReadyDraft
from .loader import PolicyError, load_policy

__all__ = ["Policy", "PolicySettings", "ReadyDraft", "PolicyError", "load_policy"]
