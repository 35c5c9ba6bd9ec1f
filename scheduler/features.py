"""The target's features of each sequence, kept for drafts that read them (the feature draft, EAGLE-style).

A sequence whose drafts say `held >= 0` keeps one feature row per entry of the target's cache: row i is
the target's last hidden state after reading the sequence up to position i, the row its LM head turned
into the prediction of token i + 1. After a verification the cache holds the prefix it had, the unread
context it read and the accepted path (layout.py), so the rows are: the old ones up to the cache's length
before the forward, the rows of the unread tokens, and the rows of the accepted draft tokens.

A verdict carries the rows the worker lacks, from the `held` its draft stated: after it, the worker holds
len(context) - 1 rows, exactly what drafting after the context needs. A verifier that is new (restarted)
reads the whole context in its first forward, so it has every row again; a sequence whose rows are short
(a forward ran without features) has its cache forgotten, so its next forward reads everything again.
"""

from __future__ import annotations

import numpy as np

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.messages import Verdict
from .jobs import SequenceState
from .layout import Layout


def wanted(states: list[SequenceState]) -> bool:
    return any(st.held >= 0 for st in states)


def keep_features(target: LanguageModel, st: SequenceState, layout: Layout, rows: np.ndarray | None,
                  path: list[int]) -> None:
    """Update `st.features` after its verification (`rows`: the forward's rows of layout.tokens)."""
    if st.held < 0:
        return
    before = layout.base - layout.unread
    old = st.features if st.features is not None else np.zeros((0, 0), np.float16)
    if rows is None or len(old) < before:  # rows missing: read the whole context again next time
        st.features = None
        target.crop(st.cache, 0)
        return
    picked = np.concatenate((rows[:layout.unread], rows[layout.unread + np.asarray(path, np.int64)]))
    picked = picked.astype(np.float16)
    st.features = picked if before == 0 else np.concatenate((old[:before], picked))


def attach(verdict: Verdict, st: SequenceState) -> Verdict:
    """The rows the worker does not hold yet, from the `held` of its last draft."""
    if st.held >= 0 and st.features is not None:
        start = min(st.held, len(st.features))
        verdict.features, verdict.features_from = st.features[start:], start
    return verdict
