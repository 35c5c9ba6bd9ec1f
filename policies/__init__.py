"""Scheduling policies: what the verifier verifies next. See ``base.py`` for the contract."""

from specsched.policies.base import Policy, PolicySettings, ReadyDraft
from specsched.policies.loader import PolicyError, load_policy

__all__ = ["Policy", "PolicySettings", "ReadyDraft", "PolicyError", "load_policy"]
