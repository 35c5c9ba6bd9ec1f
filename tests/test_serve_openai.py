"""The official `openai` package, unmodified, against `specsched serve` on the sim backend: completions,
chat, streaming, n > 1, the extension fields, the API key; and curl, as the docs show it."""

import json
import shutil
import subprocess

import httpx
import openai
import pytest
from serving import PROMPT, served, wait_for

KEY = "sk-test-0123456789"


@pytest.fixture(scope="module")
def server():
    with served(api_key=KEY) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference(server) -> str:
    """The greedy text of PROMPT decoded by the engine directly (what `specsched run` would print)."""
    cfg = server.app.jobs.config(_request(), 0)
    record = server.engine.submit(config=cfg).result(timeout=120)
    return record.sequences[0].text


def _request():
    from specsched.runtime.apps.serve.requests import Limits, parse_request

    return parse_request({"model": "sim", "prompt": PROMPT, "max_tokens": 12}, "completion", Limits())


def test_a_completion_is_the_engines_greedy_text(client, reference):
    out = client.completions.create(model="sim", prompt=PROMPT, max_tokens=12, temperature=0)
    assert out.choices[0].text == reference
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 12 and out.usage.prompt_tokens == 3


def test_a_streamed_completion_sends_the_same_text_in_pieces(client, reference):
    pieces = [c.choices[0].text for c in client.completions.create(model="sim", prompt=PROMPT, max_tokens=12,
                                                                   stream=True) if c.choices]
    assert "".join(pieces) == reference and len(pieces) > 1


def test_chat_whole_and_streamed_agree(client):
    messages = [{"role": "user", "content": PROMPT}]
    whole = client.chat.completions.create(model="sim", messages=messages, max_tokens=10)
    assert whole.choices[0].message.role == "assistant" and whole.choices[0].message.content
    stream = client.chat.completions.create(model="sim", messages=messages, max_tokens=10, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 10


def test_n_samples_and_several_prompts_each_get_a_choice(client):
    out = client.completions.create(model="sim", prompt=["kaka lomi", "nene mimi"], n=2, max_tokens=6,
                                    temperature=1.0, seed=7)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    again = client.completions.create(model="sim", prompt=["kaka lomi", "nene mimi"], n=2, max_tokens=6,
                                      temperature=1.0, seed=7)
    assert [c.text for c in again.choices] == [c.text for c in out.choices]  # a seed replays its draws
    streamed = client.chat.completions.create(model="sim", messages=[{"role": "user", "content": PROMPT}], n=3,
                                              max_tokens=5, stream=True)
    ended = {c.choices[0].index for c in streamed if c.choices and c.choices[0].finish_reason}
    assert ended == {0, 1, 2}


@pytest.mark.parametrize("extension", [{"drafter": "none"}, {"k": 1}, {"k_config": [2, 2]}, {"priority": -1},
                                       {"tickets": 500, "deadline_s": 30}])
def test_extension_fields_never_change_greedy_text(client, reference, extension):
    out = client.completions.create(model="sim", prompt=PROMPT, max_tokens=12, extra_body={"specsched": extension})
    assert out.choices[0].text == reference


def test_a_stop_string_ends_the_text_before_it(client, reference):
    stop = reference.split()[3]
    out = client.completions.create(model="sim", prompt=PROMPT, max_tokens=12, stop=[stop])
    assert out.choices[0].finish_reason == "stop"
    assert out.choices[0].text == reference[:reference.index(stop)]


def test_refusals_are_openai_errors(client, server):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="sim", prompt=PROMPT, extra_body={"specsched": {"policy": "rr"}})
    assert info.value.body["param"] == "specsched.policy"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt=PROMPT)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="sk-wrong", max_retries=0).models.list()
    assert [m.id for m in client.models.list()] == ["sim"]


def test_health_needs_no_key_and_metrics_count_the_traffic(client, server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    client.completions.create(model="sim", prompt=PROMPT, max_tokens=4)
    text = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    for name in ("specsched_requests_total", "specsched_generated_tokens_total", "specsched_queue_depth",
                 "specsched_time_to_first_token_seconds_bucket", "specsched_inter_token_latency_seconds_bucket",
                 "specsched_tokens_per_verification_bucket", 'specsched_draft_acceptance{position="1"}',
                 "specsched_verifier_busy_seconds_total", "specsched_restarts_total", "specsched_refusals_total",
                 'specsched_processes{role="draft"'):
        assert name in text, name
    wait_for(lambda: not server.app.metrics.active, what="every request ending")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_streams_a_chat_as_the_docs_show(server):
    body = {"model": "sim", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 5, "stream": True}
    out = subprocess.run(["curl", "-sS", "-N", f"{server.url}/v1/chat/completions",
                          "-H", f"Authorization: Bearer {KEY}", "-H", "Content-Type: application/json",
                          "-d", json.dumps(body)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    events = [line.removeprefix("data: ") for line in out.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"

