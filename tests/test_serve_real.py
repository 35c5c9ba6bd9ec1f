"""On the real default pair: greedy text over HTTP is `specsched run --temperature 0`'s for the same prompt,
a chat through the target's chat template as `run` wraps it, a completion as `run --raw-prompt` reads it."""

import openai
import pytest
from cli_runs import read_json, specsched
from serving import served

from specsched.runtime.core.config import RunConfig

pytestmark = pytest.mark.slow

PROMPT = "Name three colours."
CONFIG = RunConfig.of(backend="hf", device="cpu", max_new_tokens=24, temperature=0.0)


@pytest.fixture(scope="module")
def server():
    with served(CONFIG, model="smollm2") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600)


def run_text(tmp_path, *flags: str) -> str:
    path = tmp_path / "run.json"
    result = specsched("run", "--prompt", PROMPT, "--temperature", "0", "--max-new-tokens", "24", "--device", "cpu",
                       "--no-live", "--quiet", "--json", str(path), *flags, timeout=600)
    assert result.returncode == 0, result.stderr
    return read_json(path)["sequences"][0]["text"]


def test_greedy_chat_over_http_is_run_temperature_0(client, tmp_path):
    http = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": PROMPT}],
                                          max_tokens=24, temperature=0)
    streamed = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": PROMPT}],
                                              max_tokens=24, temperature=0, stream=True)
    text = run_text(tmp_path)
    assert http.choices[0].message.content == text
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == text


def test_greedy_completion_over_http_is_run_raw_prompt(client, tmp_path):
    http = client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=24, temperature=0)
    assert http.choices[0].text == run_text(tmp_path, "--raw-prompt")


def test_a_conversation_is_read_through_the_same_chat_template(server):
    tok = server.engine.tokenizer
    messages = [{"role": "user", "content": PROMPT}]
    assert tok.encode(tok.chat_text(messages), chat=False) == tok.encode(PROMPT, chat=True)
    longer = tok.chat_text([{"role": "system", "content": "Be brief."}, *messages])
    assert longer.count("Be brief.") == 1 and longer.endswith(tok.chat_text(messages)[-30:])
