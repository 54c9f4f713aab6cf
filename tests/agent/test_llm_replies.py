"""What real model servers do that a well-behaved one does not, replayed by the scripted server: tool calls
written as text, reasoning beside the answer, replies cut at their length limit, context-length errors,
streamed replies, slow replies past a deadline. The replies are fixed by each test; nothing here measures
a model. (Against a real llama.cpp server: tests/real_llm/.)
"""
import time
from pathlib import Path

import pytest
from openai_server import ScriptedOpenAI, error, messages_text, text

from agent.context import RunConfig
from agent.interfaces import TaskContext
from agent.llm import ChatClient, LLMConfig, LLMTimeUp
from agent.operators.llm import LLMOperator, NoCandidate
from agent.replies import context_length_from, fit_messages, strip_reasoning, text_tool_calls
from tools.results import TaskSpec

FIX = Path(__file__).parent / "fixtures"
GOOD = (FIX / "scale_shift_good.py").read_text()
TASK = TaskContext(name="scale_shift", source=(FIX / "task_scale_shift.py").read_text(), analysis={"flops": 2},
                   device="cpu", arch="cpu")
NAMES = {"write_kernel", "submit_candidate"}


def _chat(server: ScriptedOpenAI, **kw) -> ChatClient:
    return ChatClient(LLMConfig(model="scripted-model", api_key=server.key, base_url=server.url, retries=1,
                                backoff_s=0.001, **kw), sleep=lambda s: None)


def _operator(server: ScriptedOpenAI, **kw) -> LLMOperator:
    return LLMOperator(_chat(server, **kw), RunConfig(max_turns=6), executor=None,
                       spec=TaskSpec(str(FIX / "task_scale_shift.py")))


@pytest.mark.parametrize("reply", [
    '{"name": "submit_candidate", "arguments": {"note": "n"}}',
    'Sure.\n```json\n{"name": "submit_candidate", "parameters": {"note": "n"}}\n```',
    '<tool_call>\n{"name": "submit_candidate", "arguments": "{\\"note\\": \\"n\\"}"}\n</tool_call>',
    '{"type": "function", "function": {"name": "submit_candidate", "arguments": {"note": "n"}}}',
])
def test_tool_calls_written_as_text_are_found_in_each_usual_form(reply):
    calls = text_tool_calls(reply, NAMES)
    assert [(c["name"], c["args"]) for c in calls] == [("submit_candidate", {"note": "n"})]


def test_text_that_only_looks_like_a_call_is_not_one():
    assert text_tool_calls('{"name": "rm_rf", "arguments": {}}', NAMES) == []  # not a tool of ours
    assert text_tool_calls('{"name": "write_kernel", "arguments": 3}', NAMES) == []
    assert text_tool_calls('<think>{"name": "submit_candidate", "arguments": {}}</think>done', NAMES) == []
    assert text_tool_calls("x = {1: 2} and {oops", NAMES) == []


def test_reasoning_is_stripped_and_context_lengths_are_read_from_server_messages():
    assert strip_reasoning("<think>plan ```python\nx```</think>\nanswer") == "answer"
    assert strip_reasoning("<think>never closed ```python\nx```") == ""
    assert context_length_from("Requested tokens (5120) exceed context window of 4096") == 4096
    assert context_length_from("This model's maximum context length is 8192 tokens. However, ...") == 8192
    assert context_length_from("the server is busy") is None


def test_a_conversation_cut_to_fit_keeps_the_last_message_and_says_what_went():
    from langchain_core.messages import HumanMessage, SystemMessage
    messages = [SystemMessage("s" * 3000), HumanMessage("p" * 9000), HumanMessage("the question")]
    fitted = fit_messages(messages, 6000)
    assert sum(len(m.content) for m in fitted) <= 6000
    assert fitted[-1].content == "the question" and "characters cut to fit" in fitted[1].content
    assert fitted[0].content == "s" * 3000 and messages[1].content == "p" * 9000  # the longest went first


def test_a_tool_call_written_as_text_runs_the_tool():
    reply = 'I will save it.\n{"name": "write_kernel", "arguments": {"source": %s}}' % __import__("json").dumps(GOOD)
    with ScriptedOpenAI([text(reply), text('{"name": "submit_candidate", "arguments": {"note": "as text"}}')]) \
            as server:
        proposal, = _operator(server).propose(TASK, [], 1)
    assert proposal.source == GOOD and proposal.note == "as text"
    assert "draft saved" in messages_text(server.requests[1])  # the tool's answer went back to the model


def test_code_in_reasoning_is_never_taken_as_the_candidate():
    thinking = f"```python\n{GOOD}```"
    script = [text(f"<think>{thinking}</think>I am not sure.", reasoning_content=thinking)] * 3
    with ScriptedOpenAI(script) as server:
        proposal, = _operator(server).propose(TASK, [], 1)
    assert proposal.source == "" and "without code" in proposal.note


def test_a_reply_cut_at_its_length_limit_is_asked_again_once_with_a_note():
    with ScriptedOpenAI([text("```python\nclass ModelNew(", finish_reason="length"),
                         text(f"```python\n{GOOD}```")]) as server:
        proposal, = _operator(server).propose(TASK, [], 1)
    assert proposal.source.strip() == GOOD.strip()
    assert "cut off at its length limit" in messages_text(server.requests[1])
    with ScriptedOpenAI([text("```python\nclass", finish_reason="length")] * 2) as server:
        proposal, = _operator(server).propose(TASK, [], 1)
    assert proposal.source == "" and proposal.note == "the model's reply was cut at its length limit twice"


def test_a_context_length_error_teaches_the_client_and_the_request_is_cut_to_fit():
    with ScriptedOpenAI([error(400, "Requested tokens (9000) exceed context window of 2048"), text("ok")]) as server:
        chat = _chat(server, max_tokens=4096, stream=False)
        assert chat.invoke([("system", "s" * 200), ("user", "u" * 30000)]).content == "ok"
    first, second = server.requests
    assert chat.context_tokens == 2048
    assert second["max_tokens"] == 1024 and second["max_completion_tokens"] == 1024  # half the context
    assert len(messages_text(second)) <= (2048 - 1024) * 3 < len(messages_text(first))


def test_the_deadline_bounds_a_slow_request_and_a_stream():
    with ScriptedOpenAI([text("late", delay_s=30)]) as server:  # not streamed: the request's timeout
        chat, start = _chat(server, stream=False), time.monotonic()
        with pytest.raises(LLMTimeUp):
            chat.invoke([("user", "hi")], deadline=start + 6)
        assert time.monotonic() - start < 12
    with ScriptedOpenAI([text("x" * 400, delay_s=0.4)]) as server:  # 26 chunks, 0.4 s apart: ~10 s
        chat, start = _chat(server), time.monotonic()
        with pytest.raises(LLMTimeUp, match="streaming") as cut:
            chat.invoke([("user", "hi")], deadline=start + 6)
        assert time.monotonic() - start < 8 and 2 < chat.tokens_per_s < 20  # 16 characters every 0.4 s
        assert 160 <= len(cut.value.partial) < 400 and set(cut.value.partial) == {"x"}  # what came, kept
        while server.dropped == 0 and time.monotonic() - start < 15:  # a server sees the hang-up when it writes
            time.sleep(0.2)
        assert server.dropped == 1  # the client hung up, so the server stopped writing
    with ScriptedOpenAI([]) as server:
        with pytest.raises(LLMTimeUp, match="no time"):  # too little time left: nothing is sent
            _chat(server).invoke([("user", "hi")], deadline=time.monotonic() + 1)
        assert server.requests == []


def test_a_streamed_reply_with_a_tool_call_is_whole_and_its_speed_caps_the_next_reply():
    from openai_server import tool_calls
    with ScriptedOpenAI([tool_calls(("submit_candidate", {"source": GOOD})), text("y" * 2000)]) as server:
        chat = _chat(server)
        reply = chat.invoke([("user", "hi")], tools=[{"type": "function", "function": {
            "name": "submit_candidate", "parameters": {"type": "object", "properties": {}}}}])
        assert reply.tool_calls[0]["args"] == {"source": GOOD}
        chat.tokens_per_s = 20.0  # as if measured: 20 tokens/s with 100 s left allows 1800 tokens
        chat.invoke([("user", "hi")], deadline=time.monotonic() + 100)
    assert server.requests[0]["stream"] is True
    assert 1700 <= server.requests[1]["max_tokens"] <= 1800


def test_an_operator_past_its_deadline_ends_the_conversation_without_a_candidate():
    with ScriptedOpenAI([text("thinking...", delay_s=30)]) as server:
        op = _operator(server)
        op.deadline = time.monotonic() + 14  # a conversation gets half: 7 s
        start = time.monotonic()
        proposal, = op.propose(TASK, [], 1)
    assert proposal.source == "" and "time limit" in proposal.note and time.monotonic() - start < 12
    with pytest.raises(NoCandidate):  # and no request is even sent once the time is gone
        op.converse(TASK, None, "", "prompt")
