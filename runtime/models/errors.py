"""Errors a user can act on: each message says what went wrong and what to run."""

from __future__ import annotations


class ModelError(RuntimeError):
    """Base class for model fetch/convert/load failures."""


class ModelUnavailable(ModelError):
    """The model is not cached and cannot be fetched (no network, unknown name)."""


class UnknownModel(ModelUnavailable):
    """The user named a model that does not exist: bad input (exit 2), not a failed fetch."""


class ChecksumMismatch(ModelError):
    """A downloaded archive does not have the pinned sha256."""


class CorruptArchive(ModelError):
    """An archive cannot be read, or lacks the file it should contain."""
