"""The one judge loop and the one placeholder syntax."""

from __future__ import annotations

import asyncio

import pytest

from agents.vlm.base import ChatMessage, ChatResult, VLMError
from eval.judges.base import ask_valid, fill, json_object
from eval.tasks.avmeme import AVMemeItem


class Scripted:
    model_id = "judge"

    def __init__(self, replies):
        self.replies, self.calls = list(replies), []

    async def chat(self, messages, sampling=None):
        self.calls.append(messages)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return ChatResult(reply, "judge")


def _parse(text: str) -> int:
    value = json_object(text)["n"]
    if not isinstance(value, int) or not 0 <= value <= 3:
        raise ValueError(f"n must be an integer 0-3, got {value!r}")
    return value


def test_fill_is_one_pass_and_leaves_other_braces():
    assert fill("{{a}} and {{b}} {x} {{c}}", a="{{b}}", b="B") == "{{b}} and B {x} {{c}}"


def test_ask_valid_reasks_with_the_reason_then_reports_unscored():
    vlm = Scripted(['{"n": 7}', '```json\n{"n": 2}\n```'])
    asked = asyncio.run(ask_valid(vlm, [ChatMessage("user", "q")], _parse, max_retries=2))
    assert asked.value == 2 and asked.calls == 2 and "n must be an integer 0-3, got 7" in vlm.calls[1][-1].text
    never = Scripted(["no", "no", "no"])
    asked = asyncio.run(ask_valid(never, [ChatMessage("user", "q")], _parse, max_retries=2))
    assert asked.value is None and asked.failure == "parse" and asked.error.startswith("unparseable after 3 replies")
    down = Scripted([VLMError("503")])
    asked = asyncio.run(ask_valid(down, [ChatMessage("user", "q")], _parse))
    assert asked.value is None and asked.failure == "call" and "judge call failed" in asked.error


def test_task_prompts_fill_their_placeholders():
    item = AVMemeItem.model_validate({"benchmark": "avmeme", "id": "1", "video": "v.mp4", "question": "Who {sings}?",
                                      "options": ["a", "b"], "answer": "A"})
    text = item.instruction()
    assert "Who {sings}?" in text and "A. a\nB. b" in text and "{{" not in text


@pytest.mark.parametrize("reply", ["", "[1, 2]"])
def test_json_object_rejects_non_objects(reply):
    with pytest.raises(ValueError):
        json_object(reply)
