"""One run, start to finish, as a client of the engine: validate -> start an engine -> one job -> its record.

Everything that can be checked before a process starts is checked first (policy, backend pair, prompts),
so bad input costs one line and no process. What was verified before a failure, a Ctrl-C or a SIGTERM is
still returned: the record says ``status`` and keeps every committed token.
"""

from __future__ import annotations

import contextlib
import signal
import threading

from ....policies.loader import load_policy
from ...backends.backend import get_backend
from ...core.config import RunConfig
from ...engine.collected import Collected, Interrupted
from ...engine.engine import Engine
from ...engine.record import RunRecord, SequenceResult, build_record, measure, worker_of
from ...engine.stopping import handles_stops, stopped_by

__all__ = ["RunRecord", "SequenceResult", "measure", "prepare", "run", "sigterm_interrupts", "worker_of"]


def prepare(config: RunConfig):
    """Checks that need no process; returns the backend and the tokenised prompts."""
    load_policy(config.policy, config.supervision.policy_timeout_s)
    backend = get_backend(config)
    backend.check()
    if not config.prompts:
        config.prompts = [backend.default_prompt()]
        RunConfig.__post_init__(config)
    tokenizer = backend.tokenizer()
    prompts = [tokenizer.encode(config.prompt_for(i), chat=not config.raw_prompt)
               for i in range(config.n_sequences)]
    return backend, tokenizer, prompts


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM raises Interrupted in the main thread while the block runs, so teardown happens (exit 143).
    Under the command line's handlers (engine/stopping.py), which already do so, it changes nothing."""
    if threading.current_thread() is not threading.main_thread() or handles_stops():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted()


def run(config: RunConfig, on_update=None, *, engine: Engine | None = None, remote_workers: int = 0,
        join_timeout_s: float = 120.0) -> RunRecord:
    """One job: on `engine` if given (it stays up), else on an engine started for it and closed after.
    With `remote_workers`, the job waits (at most `join_timeout_s`) for that many workers from other
    hosts to join the engine (``listen``), and they draft for it first."""
    if engine is not None:
        return _run_job(engine, config, on_update, close=False)
    try:
        engine = Engine(config)
    except KeyboardInterrupt:  # Ctrl-C while models load: no process started, but --json still says so
        record = build_record(config, Collected(), "interrupted", "interrupted (Ctrl-C) before any process started")
        record.stopped_by = "SIGINT"
        return record
    return _run_job(engine, config, on_update, close=True, remote_workers=remote_workers,
                    join_timeout_s=join_timeout_s)


def _run_job(engine: Engine, config: RunConfig, on_update, *, close: bool, remote_workers: int = 0,
             join_timeout_s: float = 0.0) -> RunRecord:
    job = None
    with sigterm_interrupts():
        try:
            if remote_workers:
                try:
                    engine.wait_for_remote_workers(remote_workers, join_timeout_s)
                except RuntimeError as exc:
                    engine.close(str(exc))
                    return build_record(config, Collected(), "failed", str(exc))
            job = engine.submit(config=config, on_update=on_update)
            record = job.result()
            if close:
                engine.close()
            return record
        except (KeyboardInterrupt, Interrupted) as exc:
            signal_name, reason = stopped_by(exc)
    if close:
        engine.close(reason)  # stops every process; the job's record keeps what was verified
    elif job is not None:
        engine.cancel(job, reason)  # the caller's engine stays up; only this job ends
    record = build_record(config, Collected(), "interrupted", reason) if job is None else job.result()
    record.stopped_by = signal_name
    return record
