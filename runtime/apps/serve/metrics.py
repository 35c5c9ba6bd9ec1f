"""`GET /metrics`: the server's and the engine's numbers in the Prometheus text format (prometheus-client).

Latencies are taken from the engine's own commit times (`Collected.commits`), not from when a stream
happened to look. Acceptance per draft position is read from what each verification committed: n tokens
committed = the first n - 1 draft tokens accepted and, where the draft was longer, the n-th rejected (a
draft cut short by --min-confidence counts as rejected there). A job's verifier time, verifications and
restarts are counted once it has ended; a forward shared by several jobs is counted once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ...core.config_checks import MAX_K
from ...engine.engine import Engine, Job

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SHARED_FORWARDS_KEPT = 65_536   # verifier forwards remembered to count a shared one once (bounded memory)
disable_created_metrics()       # no `_created` series beside each counter: a scrape is half the size, nothing lost


class ServeMetrics:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        r = self.registry = CollectorRegistry()
        self.requests = Counter("specsched_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.refusals = Counter("specsched_refusals", "requests refused (4xx), by error code", ["code"], registry=r)
        self.prompt_tokens = Counter("specsched_prompt_tokens", "prompt tokens of the requests run", registry=r)
        self.generated = Counter("specsched_generated_tokens", "tokens sent to clients", registry=r)
        self.ttft = Histogram("specsched_time_to_first_token_seconds", "request arrival to its first committed token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("specsched_inter_token_latency_seconds", "time between a sequence's committed tokens "
                             "(a commit's gap shared by its tokens)", buckets=LATENCY_BUCKETS, registry=r)
        self.per_verification = Histogram("specsched_tokens_per_verification", "tokens one verification committed "
                                          "to one drafted sequence", buckets=tuple(range(1, 17)), registry=r)
        self.busy = Counter("specsched_verifier_busy_seconds", "time the target model spent verifying", registry=r)
        self.verifications = Counter("specsched_verifications", "target forwards of ended jobs", registry=r)
        self.restarts = Counter("specsched_restarts", "processes restarted by the supervisor", registry=r)
        r.register(_Live(self))
        self._lock = threading.Lock()          # requests run on the event loop, scrapes too, the bench reads
        self._reached = [0] * (MAX_K + 1)      # draft position i (1-based) verified ...
        self._accepted = [0] * (MAX_K + 1)     # ... and accepted
        self.active: set = set()               # followers of running requests (follow.Follower)
        self._ended: list[Job] = []            # jobs whose totals are counted once the engine has finished them
        self._forwards: OrderedDict = OrderedDict()

    def verified(self, n: int, depth: int) -> None:
        """A verification committed `n` tokens to a sequence whose drafts are `depth` tokens deep."""
        self.per_verification.observe(n)
        with self._lock:
            for i in range(1, min(n, depth + 1)):
                self._reached[i] += 1
                self._accepted[i] += 1
            if n <= depth:
                self._reached[n] += 1

    def acceptance(self) -> dict[int, float]:
        """Draft position -> the share of drafts reaching it whose token there was accepted."""
        with self._lock:
            return {i: self._accepted[i] / self._reached[i] for i in range(1, MAX_K + 1) if self._reached[i]}

    def finished_job(self, job: Job) -> None:
        with self._lock:
            self._ended.append(job)

    def settle(self) -> None:
        """Count what the jobs that have ended did (verifier time, forwards, restarts); running ones wait."""
        with self._lock:
            done, self._ended = [j for j in self._ended if j.done()], [j for j in self._ended if not j.done()]
        for job in done:
            c = job.collected
            self.restarts.inc(len(c.restarts))
            self.verifications.inc(int(c.counters.get("verifications", 0)))
            for e in c.events:
                if e.role == "verifier" and e.kind in ("verify", "resample") and (e.pid, e.start) not in self._forwards:
                    self._forwards[(e.pid, e.start)] = None
                    self.busy.inc(max(e.end - e.start, 0.0))
            while len(self._forwards) > SHARED_FORWARDS_KEPT:
                self._forwards.popitem(last=False)

    def render(self) -> bytes:
        self.settle()
        return generate_latest(self.registry)


class _Live:
    """What is read from the engine and the running requests at scrape time."""

    def __init__(self, metrics: ServeMetrics) -> None:
        self.m = metrics

    def collect(self):
        m, active = self.m, self.m.active.copy()  # one C call under the GIL: the event loop may add one meanwhile
        yield GaugeMetricFamily("specsched_requests_in_flight", "requests being decoded or streamed", value=len(active))
        yield GaugeMetricFamily("specsched_queue_depth", "requests waiting for their first token",
                                value=sum(f.first_token_s is None for f in active))
        states = GaugeMetricFamily("specsched_processes", "the engine's processes by role and state",
                                   labels=["role", "state"])
        counts: dict[tuple[str, str], int] = {}
        for p in m.engine.processes:
            counts[(p["role"], p["state"])] = counts.get((p["role"], p["state"]), 0) + 1
        for (role, state), n in sorted(counts.items()):
            states.add_metric([role, state], n)
        yield states
        accept = GaugeMetricFamily("specsched_draft_acceptance", "acceptance by draft position (1 = the first "
                                   "draft token)", labels=["position"])
        for position, share in m.acceptance().items():
            accept.add_metric([str(position)], share)
        yield accept
        yield CounterMetricFamily("specsched_engine_rejected_messages", "telemetry refused: malformed or from no "
                                  "child of the engine", value=m.engine.rejected_telemetry)
        yield CounterMetricFamily("specsched_engine_refused_handshakes", "tcp peers without the run's key",
                                  value=m.engine.refused_handshakes)
