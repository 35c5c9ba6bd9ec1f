"""A client that goes away mid-answer has its job cancelled: the engine reports its workers parked again,
long before the job could have finished (its budget would take the sim minutes). Waits are generous and
nothing is timed."""

import json
import socket

import httpx
import pytest
from serving import PROMPT, SIM, served, wait_for

from specsched.runtime.apps.serve.requests import Limits

SLOW = SIM.replace(sim_verify_ms=20.0)   # about 150 tokens/s: 100,000 tokens take ten minutes
ENDLESS = {"model": "sim", "prompt": PROMPT, "max_tokens": 100_000}


@pytest.fixture(scope="module")
def server():
    with served(SLOW, limits=Limits(max_tokens=100_000), prestart=3) as s:
        yield s


def job_of_drafting(server) -> int:
    wait_for(lambda: server.drafting(), what="a worker drafting")
    (job,) = {p["job"] for p in server.drafting()}
    return job


def freed(server, job: int) -> bool:
    return not any(p["job"] == job for p in server.drafting()) and not server.app.metrics.active


def test_a_stream_cut_off_mid_answer_frees_its_workers(server):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        with client.stream("POST", "/v1/completions", json={**ENDLESS, "n": 2, "stream": True}) as r:
            lines = r.iter_lines()
            received = [next(lines) for _ in range(6)]   # a few events: the job is running
            job = job_of_drafting(server)
            assert len({p["name"] for p in server.drafting()}) == 2
        # leaving the block closes the connection mid-stream
    assert any(line.startswith("data: {") for line in received)
    wait_for(lambda: freed(server, job), what="the cut-off job's workers parked")
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}


def test_a_client_that_stops_waiting_for_a_whole_answer_frees_its_workers(server):
    body = json.dumps({"model": "sim", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 100_000})
    with socket.create_connection((server.server.host, server.server.port)) as client:
        client.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        job = job_of_drafting(server)
    # the client hung up before any answer: the server sees the connection close
    wait_for(lambda: freed(server, job), what="the abandoned job's workers parked")
    # the engine goes on serving
    short = httpx.post(server.url + "/v1/completions", json={**ENDLESS, "max_tokens": 5}, timeout=120).json()
    assert short["usage"]["completion_tokens"] == 5
