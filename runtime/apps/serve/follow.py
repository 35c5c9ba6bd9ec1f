"""A running job's committed tokens as text deltas, one sequence per choice, as the verifier commits them.

The engine's `Collected` grows on its own thread; a follower looks at it every `POLL_S` (a length compare
when nothing came) and turns each sequence's tokens into the text not yet sent. Text is decoded whole each
time and only its new suffix sent, so a character split across tokens (U+FFFD until its last byte comes)
and the start of a stop string are held back until they are settled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from ...engine.engine import Engine, Job
from .metrics import ServeMetrics

POLL_S = 0.01         # how stale a streamed token may be; the metrics use the engine's own commit times
PARTIAL = "\ufffd"    # what a tokenizer decodes an incomplete UTF-8 sequence to
LET_GO = "interrupted (the client went away or its text is complete)"  # a job the server stops: its record's error


@dataclass(slots=True)
class SequenceText:
    """One choice's text: what was sent so far, and why it ended (None while it goes on)."""

    decode: Callable[[Sequence[int]], str]
    stops: tuple[str, ...]
    budget: int
    sent: str = ""
    tokens: int = 0
    finish_reason: str | None = None

    def advance(self, tokens: list[int], finished: bool) -> str:
        """The text to send now: `tokens` are the sequence's whole output so far."""
        if self.finish_reason is not None:
            return ""
        self.tokens = len(tokens)
        text = self.decode(tokens)
        cuts = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if cuts:  # OpenAI's rule: the text ends before the first stop string, which is not sent
            text, self.finish_reason = text[:min(cuts)], "stop"
        elif finished:
            self.finish_reason = "length" if len(tokens) >= self.budget else "stop"
        else:
            text = text.rstrip(PARTIAL)
            text = text[:len(text) - _stop_prefix(text, self.stops)]
        if not text.startswith(self.sent):  # a longer decode re-spelled what was sent: wait for more
            return ""
        delta, self.sent = text[len(self.sent):], text
        return delta


def _stop_prefix(text: str, stops: tuple[str, ...]) -> int:
    """The longest end of `text` that may be the start of a stop string (held back until it is not)."""
    return max((n for s in stops for n in range(min(len(s) - 1, len(text)), 0, -1) if text.endswith(s[:n])),
               default=0)


class Follower:
    """Follows one submitted job; `close()` cancels it if it is still running (a client that went away)."""

    def __init__(self, engine: Engine, job: Job, *, arrival: float, stops: tuple[str, ...], budget: int,
                 metrics: ServeMetrics, depth: int) -> None:
        self.engine, self.job, self.arrival, self.metrics = engine, job, arrival, metrics
        self.texts = [SequenceText(engine.tokenizer.decode, stops, budget) for _ in job.sequence_ids]
        self.depth = depth                        # draft tokens deep (0: the target alone)
        self.first_token_s: float | None = None   # after the request arrived, on the engine's commit clock
        self.gone = False                         # the client closed its connection: stop following
        self._seen = 0                            # commits read so far
        self._last: dict[int, float] = {}         # per sequence: when its latest commit arrived

    @property
    def ended(self) -> bool:
        return all(t.finish_reason is not None for t in self.texts)

    async def deltas(self) -> AsyncIterator[list[tuple[int, str, str | None]]]:
        """Each time a choice has news: (choice index, new text, finish reason once it ended) triples; the
        iteration ends when every choice has ended."""
        collected, told = self.job.collected, set()
        while not self.ended and not self.gone:
            finished = self.job.done()  # read before the tokens: a finished job's tokens are all there
            if finished or len(collected.commits) > self._seen:
                self._observe(collected.commits)
                out = []
                for i, t in enumerate(self.texts):
                    delta = t.advance(list(collected.tokens.get(i, ())), finished or i in collected.done)
                    end = t.finish_reason if t.finish_reason is not None and i not in told else None
                    told |= {i} if end else set()
                    if delta or end:
                        out.append((i, delta, end))
                if out:
                    yield out
            if not self.ended and not self.gone:
                await asyncio.sleep(POLL_S)

    def _observe(self, commits: list) -> None:
        """Time to first token and between tokens, and tokens per verification, from the engine's commit times."""
        new, self._seen = commits[self._seen:], len(commits)
        for received, seq, n in new:
            if self.first_token_s is None:
                self.first_token_s = max(received - self.arrival, 0.0)
                self.metrics.ttft.observe(self.first_token_s)
            elif seq in self._last and n:
                for _ in range(n):  # the commit's tokens arrived together: each waited its share of the gap
                    self.metrics.itl.observe((received - self._last[seq]) / n)
            self._last[seq] = received
            if self.depth and n:
                self.metrics.verified(n, self.depth)

    def error(self) -> str | None:
        """Why the job failed, or was cut short by the engine (the server stopping); None: it ended well, was let
        go by us, or still runs."""
        if not self.job.done():
            return None
        try:
            record = self.job.result(timeout=0)
        except (RuntimeError, TimeoutError) as exc:
            return str(exc)
        return record.error if record.status != "ok" and record.error != LET_GO else None

    def close(self) -> None:
        """Free the job's workers now if it still decodes (every choice hit a stop string, or the client left).
        A job whose every sequence has its last token is left to end by itself: its record stays whole."""
        if not self.job.done() and not set(range(len(self.texts))) <= self.job.collected.done:
            try:
                self.engine.cancel(self.job, LET_GO)
            except RuntimeError:  # the engine is closing: the job ends with it
                pass
        self.metrics.finished_job(self.job)

    def elapsed(self) -> float:
        return time.monotonic() - self.arrival
