"""1,000 malformed requests against a running server (sim): every one answered in the 4xx range with an
OpenAI error body, the server still up, and good requests running beside them decode what they decode alone."""

import asyncio
import json
import random

import httpx
from serving import PROMPT, served, wait_for

from specsched.runtime.apps.serve.requests import Limits

LIMITS = Limits(max_body_bytes=8192, max_tokens=256, max_n=4)
GOOD = {"model": "sim", "prompt": PROMPT, "max_tokens": 64}
FIELDS_WRONG = {"n": ["2", 1.5, True, 0, [], {}], "max_tokens": ["8", -1, 0, 10**9, 2.5, False],
                "temperature": ["hot", -1, 3, [0.5]], "top_p": [0, -0.5, 1.5, "1"], "top_k": [-1, 0.5, "5"],
                "seed": [-1, 2**64, "7", 1.0], "stop": [3, [1], [""], ["a"] * 9, {"x": 1}], "stream": ["yes", 1],
                "prompt": [None, 3, [], [3], "", "   ", {"text": "x"}], "model": [None, 3, "gpt-4", ""],
                "stream_options": [True, {"include_usage": "y"}, {"other": 1}], "logprobs": [5, True],
                "echo": [True], "best_of": [3], "suffix": ["x"], "presence_penalty": [1.0],
                "logit_bias": [{"1": 100}]}
EXTENSION_WRONG = [{"drafter": "oracle"}, {"drafter": 3}, {"k": 0}, {"k": 10**6}, {"k": "4"}, {"tree": "wide"},
                   {"k_config": []}, {"k_config": [0]}, {"k_config": "2,2"}, {"priority": "high"},
                   {"priority": 2**70}, {"tickets": 0}, {"deadline_s": -1}, {"deadline_s": "soon"},
                   {"policy": "rr"}, {"target": "gpt2"}, {"mode": "ar"}, {"colour": "red"}, "fast", [1]]


def malformed(rng: random.Random, i: int) -> tuple[str, str, bytes]:
    """Request i: (method, path, body), one of six kinds in turn."""
    kind = i % 6
    if kind == 0:  # bad JSON
        text = json.dumps(GOOD)
        return "POST", "/v1/completions", rng.choice([text[:rng.randrange(1, len(text))].encode(),
                                                       bytes(rng.randrange(256) for _ in range(40)), b"",
                                                       b"[1, 2]", b"42", b'"prompt"', b"{'model': 'sim'}",
                                                       b'{"model": "sim", "prompt": "x", "n": NaN}'])
    if kind == 1:  # a field of the wrong type or out of range
        name = rng.choice(sorted(FIELDS_WRONG))
        return "POST", "/v1/completions", json.dumps({**GOOD, name: rng.choice(FIELDS_WRONG[name])}).encode()
    if kind == 2:  # a chat that is not one
        messages = rng.choice([[], "hi", [{"role": "user"}], [{"role": "robot", "content": "x"}],
                               [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
                               [{"role": "user", "content": ["x"]}], [{"role": "user", "content": "x", "id": 1}]])
        return "POST", "/v1/chat/completions", json.dumps({"model": "sim", "messages": messages}).encode()
    if kind == 3:  # over the body limit
        return "POST", "/v1/completions", json.dumps({**GOOD, "prompt": "ka " * rng.randrange(3000, 9000)}).encode()
    if kind == 4:  # unknown or refused extension values
        return "POST", "/v1/completions", json.dumps({**GOOD, "specsched": rng.choice(EXTENSION_WRONG)}).encode()
    return rng.choice([("GET", "/v1/completions", b""), ("POST", "/v1/nothing", b"{}"), ("DELETE", "/health", b""),
                       ("POST", "/v1/models", json.dumps(GOOD).encode())])


async def flood(url: str, count: int) -> tuple[list[int], list[dict], str]:
    """`count` malformed requests, 16 at a time, while a good request streams; their statuses and bodies, and
    the good request's text."""
    rng, gate = random.Random(46), asyncio.Semaphore(16)
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        async def one(i: int) -> tuple[int, dict]:
            method, path, body = malformed(rng, i)
            async with gate:
                r = await client.request(method, path, content=body, headers={"Content-Type": "application/json"})
            return r.status_code, r.json()

        async def good() -> str:
            text = ""
            async with client.stream("POST", "/v1/completions", json={**GOOD, "stream": True}) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        text += json.loads(line[6:])["choices"][0]["text"]
            return text

        streaming = asyncio.create_task(good())
        answers = await asyncio.gather(*(one(i) for i in range(count)))
        return [s for s, _ in answers], [b for _, b in answers], await streaming


def test_a_thousand_malformed_requests_get_a_thousand_4xx_and_change_nothing():
    with served(limits=LIMITS) as s:
        alone = httpx.post(s.url + "/v1/completions", json=GOOD, timeout=120).json()["choices"][0]["text"]
        statuses, bodies, beside = asyncio.run(flood(s.url, 1000))
        assert len(statuses) == 1000
        assert [c for c in statuses if not 400 <= c <= 499] == []
        assert {413, 404, 405, 400} <= set(statuses)
        assert all(set(b["error"]) == {"message", "type", "param", "code"} for b in bodies)
        assert beside == alone
        assert httpx.get(s.url + "/health").json() == {"status": "ok"} and s.engine.broken is None
        after = httpx.post(s.url + "/v1/completions", json=GOOD, timeout=120).json()["choices"][0]["text"]
        assert after == alone
        wait_for(lambda: not s.drafting(), what="every worker parked")
