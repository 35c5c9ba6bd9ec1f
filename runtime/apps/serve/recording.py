"""`specsched serve --trace PATH`: the server's requests recorded as one workload, written when it stops.

Each request is a job with a record of its own. When the server stops (Ctrl-C, SIGTERM) the records are put on
one timeline as a workload's are (commands/workload_trace.py): one --mode seed run of every job's sequences,
with a ``workload`` section giving each job's arrival (when it was submitted to the engine), priority, deadline,
budget and workers. `specsched replay`, `export` and `whatif` then read a server's traffic as they read any
run. A request decoded by the target alone (``"drafter": "none"``) had no drafts to schedule and is left out;
the line the server ends with says so, and how many were kept. The trace's status is that of the requests as
they were asked: "ok" unless one failed or the server's stop cut one short ("interrupted"); one whose client
left, or whose text reached a stop string, is "interrupted" in the workload section only.

The records are held until the server stops: a server recording for days holds every request's events.
"""

from __future__ import annotations

from ...core.config import Mode, RunConfig
from ...core.config_checks import MAX_SEQUENCES
from ...engine.engine import Job
from ...engine.record import RunRecord
from ..commands.workload import WorkloadJob
from ..commands.workload_trace import merged
from ..run.trace import write_trace
from .follow import LET_GO

RESULT_TIMEOUT_S = 60.0  # the engine has closed by now: every job's record is built, or never will be


class Recording:
    """The jobs of a server, written as one trace to `path` by `write()` once the engine has closed."""

    def __init__(self, path: str, defaults: RunConfig) -> None:
        self.path, self.defaults = path, defaults
        self.jobs: list[Job] = []  # in submission order; appended from the server's threads (atomic)

    def add(self, job: Job) -> None:
        self.jobs.append(job)

    def write(self, stopped_by: str | None = None) -> str:
        """Write the trace (OSError if it cannot be); the line that says what it holds, or why nothing was written.
        `stopped_by`: the signal that stopped the server ("SIGINT", "SIGTERM")."""
        records: list[RunRecord] = []
        for job in sorted(self.jobs, key=lambda j: j.id):
            try:
                records.append(job.result(timeout=RESULT_TIMEOUT_S))
            except (RuntimeError, TimeoutError):  # no record was built: nothing of it can be kept
                continue
        kept = [r for r in records if r.config.mode == Mode.SEED]
        full = next((i for i in range(len(kept)) if sum(r.config.n_sequences for r in kept[:i + 1]) > MAX_SEQUENCES),
                    len(kept))
        left = [f"{len(records) - len(kept)} decoded by the target alone"] * (len(kept) < len(records)) + \
            [f"{len(kept) - full} beyond a trace's {MAX_SEQUENCES:,} sequences"] * (full < len(kept))
        kept = kept[:full]
        if not kept:
            return f"--trace {self.path}: no request to record ({len(records)} ran); nothing written"
        t0 = min(r.collected.started for r in kept)
        jobs = [WorkloadJob(r.collected.started - t0, list(r.config.prompts), r.extra["engine"]["priority"],
                            r.extra["engine"]["deadline_s"], r.config.max_new_tokens, r.extra["engine"]["name"])
                for r in kept]
        whole = merged(self.defaults, jobs, kept, [r.config for r in kept])
        # a request the server let go (its client left, its text reached a stop string) ended as it was asked:
        # the trace is whole unless a job failed or the stop cut one short (the section keeps each one's status)
        cut = next((r for r in kept if r.status != "ok" and r.error != LET_GO), None)
        whole.status, whole.error = (cut.status, cut.error) if cut else ("ok", None)
        whole.stopped_by = stopped_by if cut and cut.status == "interrupted" else None
        write_trace(whole, self.path)
        return f"trace of {len(kept)} requests written to {self.path}" + (f" ({'; '.join(left)} left out)" if left
                                                                          else "")
