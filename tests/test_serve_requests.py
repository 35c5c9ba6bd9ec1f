"""What a request may say (no server): each bad field is a 400 naming it; extension fields become the job's
settings; streamed text holds back what is not settled and ends before a stop string."""

import pytest

from specsched.runtime.apps.serve.errors import ApiError
from specsched.runtime.apps.serve.extension import parse_extension
from specsched.runtime.apps.serve.follow import SequenceText
from specsched.runtime.apps.serve.requests import Limits, parse_body, parse_request
from specsched.runtime.apps.serve.shapes import Answer

LIMITS = Limits(max_body_bytes=4096, max_tokens=64, max_n=4)


def completion(**fields) -> dict:
    return {"model": "sim", "prompt": "kaka lomi", **fields}


def refused(data: dict, kind: str = "completion") -> ApiError:
    with pytest.raises(ApiError) as info:
        parse_request(data, kind, LIMITS)
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize("fields, param", [
    ({"n": 0}, "n"), ({"n": 5}, "n"), ({"n": True}, "n"), ({"max_tokens": 65}, "max_tokens"),
    ({"max_tokens": "8"}, "max_tokens"), ({"temperature": -0.1}, "temperature"), ({"temperature": 2.5}, "temperature"),
    ({"top_p": 0}, "top_p"), ({"top_k": -1}, "top_k"), ({"seed": -1}, "seed"), ({"stop": ["a"] * 5}, "stop"),
    ({"stop": [""]}, "stop"), ({"stream": "yes"}, "stream"), ({"prompt": ""}, "prompt"),
    ({"prompt": [1, 2]}, "prompt[0]"),
    ({"prompt": "\udcff"}, "prompt"), ({"logprobs": 3}, "logprobs"), ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"best_of": 2}, "best_of"), ({"frobnicate": 1}, "frobnicate"), ({"model": 3}, "model"),
    ({"specsched": {"policy": "rr"}}, "specsched.policy"), ({"specsched": {"k": 0}}, "specsched.k"),
    ({"specsched": {"drafter": "oracle"}}, "specsched.drafter"), ({"specsched": {"colour": 1}}, "specsched.colour"),
    ({"specsched": {"deadline_s": float("inf")}}, "specsched.deadline_s"), ({"specsched": []}, "specsched"),
])
def test_a_bad_field_is_a_400_that_names_it(fields, param):
    error = refused(completion(**fields))
    assert error.param == param and error.message.startswith(param)
    assert set(error.body["error"]) == {"message", "type", "param", "code"}


def test_a_chat_needs_a_conversation_ending_with_the_user():
    assert refused({"model": "sim", "messages": []}, "chat").param == "messages"
    assert refused({"model": "sim", "messages": [{"role": "tool", "content": "x"}]}, "chat").param == \
        "messages[0].role"
    assert refused({"model": "sim", "messages": [{"role": "user", "content": "x"},
                                                 {"role": "assistant", "content": "y"}]}, "chat").param == "messages"


@pytest.mark.parametrize("body", [b"{", b"[1]", b"\xff\xfe", b"null", b"[" * 100_000])
def test_a_body_that_is_not_a_json_object_is_refused(body):
    with pytest.raises(ApiError) as info:
        parse_body(body)
    assert info.value.status == 400 and info.value.code == "invalid_json"


def test_openai_defaults_sent_by_clients_are_accepted():
    req = parse_request(completion(presence_penalty=0, frequency_penalty=0.0, logit_bias={}, echo=False, best_of=1,
                                   logprobs=None, user="u", stream_options={"include_usage": True}, stream=True),
                        "completion", LIMITS)
    assert req.stream and req.include_usage and req.n == 1 and req.max_tokens is None


def test_extension_fields_become_the_jobs_settings():
    ext = parse_extension({"priority": -2, "tickets": 300, "deadline_s": 1.5, "k": 2, "tree": "fixed"})
    assert (ext.priority, ext.deadline_s) == (-2, 1.5)
    assert ext.settings(1) == {"tickets": [300], "k": 2, "tree": "fixed"}
    assert parse_extension({"drafter": "none"}).settings(1) == {"mode": "ar"}
    assert parse_extension({"drafter": "none"}).settings(3) == {"mode": "parallel"}  # batched target-only
    assert parse_extension({"k_config": [2, 1]}).settings(1) == {"k_config": [2, 1]}


def spell(tokens):
    return "".join(tokens)


def test_streamed_text_ends_before_a_stop_string_and_holds_back_its_start():
    text = SequenceText(spell, stops=("END",), budget=100)
    assert text.advance(["a", "b", "E"], finished=False) == "ab"  # "E" may begin END: held back
    assert text.advance(["a", "b", "E", "x"], finished=False) == "Ex"
    assert text.advance(["a", "b", "E", "x", "EN", "D", "zz"], finished=False) == ""
    assert text.finish_reason == "stop" and text.sent == "abEx"


def test_a_character_split_across_tokens_is_sent_whole():
    text = SequenceText(spell, stops=(), budget=3)
    assert text.advance(["h", "\ufffd"], finished=False) == "h"
    assert text.advance(["h", "é"], finished=False) == "é"
    assert text.advance(["h", "é", "!"], finished=True) == "!" and text.finish_reason == "length"


def test_answer_shapes_are_openais():
    chat = Answer("chat", "m")
    whole = chat.whole(["hi"], ["stop"], {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"] == {"role": "assistant",
                                                                                       "content": "hi"}
    assert chat.chunk(0, "", None, first=True)["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert Answer("completion", "m").chunk(1, "x", "length")["choices"][0] == \
        {"index": 1, "text": "x", "logprobs": None, "finish_reason": "length"}


def test_acceptance_per_draft_position_is_read_from_what_each_verification_committed():
    from specsched.runtime.apps.serve.metrics import ServeMetrics

    m = ServeMetrics(engine=None)   # only what the commits say; the engine is read at scrape time
    m.verified(3, depth=4)   # 2 draft tokens accepted, the 3rd rejected, the 4th never judged
    m.verified(5, depth=4)   # all 4 accepted, plus the bonus token
    m.verified(1, depth=4)   # the first rejected
    assert m.acceptance() == {1: 2 / 3, 2: 2 / 2, 3: 1 / 2, 4: 1 / 1}
