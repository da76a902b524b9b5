"""Test doubles shared by the test suites (never imported by library code)."""

from tests.fakes.openai_server import FakeOpenAIServer, FakeReply, RecordedRequest
from tests.fakes.vlm import ScriptedVLM

__all__ = ["FakeOpenAIServer", "FakeReply", "RecordedRequest", "ScriptedVLM"]
