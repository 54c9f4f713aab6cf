"""The chat client and the LLM operator's conversation, against the scripted OpenAI-compatible server.

No evaluator runs here (the scripted replies never ask for test_kernel), so these tests take seconds.
The server's replies are fixed by each test: nothing here says anything about any model's quality.
"""
import socket
from pathlib import Path

import jinja2
import pytest
from openai_server import ScriptedOpenAI, error, messages_text, text, tool_calls

from agent.context import RunConfig
from agent.interfaces import Individual, Retrieved, TaskContext
from agent.llm import ChatClient, LLMConfig, LLMConfigError, LLMError, llm_config
from agent.operators.llm import LLMOperator, StrategyPool
from agent.prompts import ParentView, ProposalPrompt, _env, load_strategies, render_proposal, render_system
from tools.results import EvalResult, TaskSpec

FIX = Path(__file__).parent / "fixtures"
GOOD = (FIX / "scale_shift_good.py").read_text()
TASK = TaskContext(name="scale_shift", source=(FIX / "task_scale_shift.py").read_text(), analysis={"flops": 2},
                   device="cpu", arch="cpu")


def _chat(server: ScriptedOpenAI, **kw) -> ChatClient:
    config = LLMConfig(model="scripted-model", api_key=kw.pop("key", server.key), base_url=server.url,
                       backoff_s=0.001, **kw)
    return ChatClient(config, sleep=lambda s: None)


def _operator(server: ScriptedOpenAI) -> LLMOperator:
    return LLMOperator(_chat(server), RunConfig(max_turns=6), executor=None,
                       spec=TaskSpec(str(FIX / "task_scale_shift.py")))


def test_llm_config_from_flags_and_environment():
    assert llm_config(None, None, env={}) is None  # nothing configured: no LLM operator
    with pytest.raises(LLMConfigError, match="--model"):
        llm_config(None, None, env={"OPENAI_API_KEY": "k"})
    with pytest.raises(LLMConfigError, match="OPENAI_API_KEY is not set"):
        llm_config("m", None, env={})
    c = llm_config("m", None, env={"OPENAI_API_KEY": "sk-secret", "OPENAI_BASE_URL": "http://h:1/v1"})
    assert (c.model, c.base_url, c.api_key) == ("m", "http://h:1/v1", "sk-secret") and "secret" not in repr(c)


def test_rate_limits_and_server_errors_are_retried_then_answered():
    with ScriptedOpenAI([error(429, "slow down"), error(503, "busy"), text("hello")]) as server:
        chat = _chat(server, retries=3)
        assert chat.invoke([("user", "hi")]).content == "hello"
        assert chat.retried == 2 and len(server.requests) == 3


def test_retries_are_bounded_and_end_in_one_line():
    with ScriptedOpenAI([error(500)] * 3) as server:
        with pytest.raises(LLMError) as e:
            _chat(server, retries=2).invoke([("user", "hi")])
        assert len(server.requests) == 3 and "answered 500" in str(e.value) and "\n" not in str(e.value)


def test_a_bad_key_fails_at_once_with_a_clear_message():
    with ScriptedOpenAI([text("never sent")]) as server:
        chat = _chat(server, key="wrong")
        with pytest.raises(LLMError, match="rejected the API key"):
            chat.check()
        with pytest.raises(LLMError, match="rejected the API key"):
            chat.invoke([("user", "hi")])
        assert server.requests == []  # 401 is not retried, and nothing reached the chat route
        _chat(server).check()  # the right key passes the check


def test_an_unreachable_endpoint_is_a_clear_error():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    chat = ChatClient(LLMConfig(model="m", api_key="k", base_url=f"http://127.0.0.1:{port}/v1", retries=1,
                                backoff_s=0.001, timeout_s=5), sleep=lambda s: None)
    with pytest.raises(LLMError, match=f"cannot reach the LLM endpoint at http://127.0.0.1:{port}/v1"):
        chat.check()


def test_conversation_recovers_from_malformed_calls_and_replies_without_code():
    script = [
        tool_calls(("write_kernel", '{"source": "unterminated')),  # arguments that are not JSON
        text("I think a fused kernel would be best."),  # no tool call, no code
        tool_calls(("read_parent", {}), ("write_kernel", {"source": GOOD})),
        tool_calls(("compile_kernel", {})),
        tool_calls(("submit_candidate", {"note": "one fused pass"})),
    ]
    with ScriptedOpenAI(script) as server:
        op = _operator(server)
        [proposal] = op.propose(TASK, [], 1)
    assert proposal.source == GOOD and proposal.operator == "llm" and proposal.note == "one fused pass"
    assert proposal.strategy.startswith("[") and "Reference (PyTorch)" in proposal.prompt
    assert proposal.features["launches"] == 1 and proposal.features["access"] == "one_pass"
    tools = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert tools == ["read_parent", "search_knowledge", "write_kernel", "compile_kernel", "test_kernel",
                     "profile_kernel", "submit_candidate"]
    assert "not a valid JSON object" in messages_text(server.requests[1])
    assert "no tool call and no code" in messages_text(server.requests[2])
    third = server.requests[3]["messages"]
    assert "There is no parent yet" in messages_text(server.requests[3])
    assert any(m["role"] == "tool" and "defines ModelNew" in (m["content"] or "") for m in third)


def test_a_code_block_reply_counts_as_a_submission_and_silence_ends_the_attempt():
    with ScriptedOpenAI([text(f"Here it is:\n```python\n{GOOD}```"), text("no"), text("no"), text("no")]) as server:
        op = _operator(server)
        first = op.propose(TASK, [], 1)
        assert first[0].source.strip() == GOOD.strip()
        silent, = op.propose(TASK, [], 1)  # three replies without code: a proposal with no code, and why
        assert silent.source == "" and silent.note == "the model replied without code or a tool call"
        assert silent.prompt.count("--- model reply") == 3 and "\nno\n[finish: stop" in silent.prompt
        assert len(server.requests) == 4


def test_the_parent_and_its_error_are_in_the_prompt():
    parent = Individual(7, GOOD.replace("+ 0.5", ""), "llm", None,
                        result=EvalResult("incorrect", "Incorrect: max abs error 5.00e-01."))
    with ScriptedOpenAI([tool_calls(("submit_candidate", {"source": GOOD}))]) as server:
        op = _operator(server)
        op.propose(TASK, [parent], 1)
    shown = messages_text(server.requests[0])
    assert "Parent kernel #7" in shown and "Incorrect: max abs error 5.00e-01." in shown
    assert "correctness: fix the failure" in shown


def test_strategies_are_scored_by_their_kernels_and_resampled_by_score():
    pool = StrategyPool(seed=3)
    good = pool.text(["fuse", "coalesce"])
    bad = pool.text(["persistent", "tensor-cores"])
    ok = EvalResult("correct", "ok", timing=None)
    archive = [Individual(i, f"s{i}", "llm", None, strategy=good, result=ok) for i in range(1, 5)]
    archive += [Individual(i, f"s{i}", "llm", None, strategy=bad, result=EvalResult("incorrect", "x"))
                for i in range(5, 9)]
    scores = pool.scores(archive)
    assert scores[("fuse", "coalesce")] > scores[("persistent", "tensor-cores")]
    drawn = [pool.next(archive) for _ in range(200)]
    assert all(1 <= len(pool.keys(s)) <= 3 for s in drawn)
    near_good = sum(len(set(pool.keys(s)) & {"fuse", "coalesce"}) >= 1 for s in drawn)
    near_bad = sum(len(set(pool.keys(s)) & {"persistent", "tensor-cores"}) >= 1 for s in drawn)
    assert near_good > near_bad
    assert StrategyPool(seed=3).next([]) == StrategyPool(seed=3).next([])  # seeded


def test_prompt_fits_its_budget_dropping_docs_before_cutting_code():
    docs = [Retrieved("doc", f"doc-{i}", "memory coalescing notes " * 60, {}, 0.5) for i in range(6)]
    kernels = [Retrieved("kernel", "k-1", GOOD, {}, 0.9)]
    parent = ParentView(3, GOOD, "correct", "", ["time: 1 ms"])
    p = ProposalPrompt("scale_shift", "cpu", TASK.source, ["roofline: memory"], parent,
                       ["#2 (llm): incorrect: " + "x" * 900], kernels, docs)
    full = render_proposal(p, 100_000)
    assert all(d.id in full for d in docs) and "k-1" in full
    fitted = render_proposal(p, 4000)
    assert len(fitted) <= 4000
    assert "doc-5" not in fitted and GOOD.strip() in fitted  # documents go before the parent's code
    tiny = render_proposal(p, 1500)
    assert len(tiny) <= 1500 and "Parent kernel #3" in tiny and "characters cut]" in tiny
    assert len(p.docs) == 6  # the caller's prompt is not modified


def test_templates_refuse_undefined_variables():
    with pytest.raises(jinja2.UndefinedError):
        _env().get_template("proposal.j2").render(task_name="t")
    system = render_system("[fuse] Fuse.", [("read_parent", "read it")], 2)
    assert "[fuse] Fuse." in system and "- read_parent: read it" in system and "2 time(s)" in system
    assert set(load_strategies()) >= {"correct-first", "fuse", "coalesce", "autotune", "tensor-cores"}
