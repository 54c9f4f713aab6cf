"""One full search with the LLM operator: the scripted server drives langchain-openai's real client; the
evaluator, the knowledge store (Chroma) and the run store (SQLite) are the real ones.

Round 1 retrieves, reads the (absent) parent, searches the knowledge store, submits a wrong kernel.
Round 2's prompt must carry round 1's error; it tests a fixed kernel with the evaluator and submits it.
The replies are fixed by this test; nothing here measures a model.
"""
from pathlib import Path

import pytest
from openai_server import ScriptedOpenAI, messages_text, tool_calls

from agent.analysis import analyze
from agent.context import Run, RunConfig
from agent.graph import run_search
from agent.interfaces import TaskContext
from agent.llm import ChatClient, LLMConfig
from agent.operators.llm import LLMOperator
from agent.policies import GreedyPolicy
from agent.runstore import RunStore
from knowledge.store import KnowledgeStore
from tools.executor import LocalExecutor
from tools.results import TaskSpec

FIX = Path(__file__).parent / "fixtures"
TASK = FIX / "task_scale_shift.py"
GOOD, WRONG = (FIX / "scale_shift_good.py").read_text(), (FIX / "scale_shift_wrong.py").read_text()


@pytest.mark.slow
def test_llm_rounds_retrieve_call_tools_store_and_feed_errors_back(tmp_path):
    script = [
        tool_calls(("read_parent", {}), ("search_knowledge", {"query": "elementwise scale kernel", "kind": "kernel"})),
        tool_calls(("write_kernel", {"source": WRONG})),
        tool_calls(("submit_candidate", {"note": "first draft"})),
        tool_calls(("write_kernel", {"source": GOOD}), ("test_kernel", {})),
        tool_calls(("submit_candidate", {"note": "added the shift"})),
    ]
    config = RunConfig(budget=2, batch_size=1, parents=1, plateau=0, trials=1, k_docs=2, k_kernels=1)
    spec = TaskSpec(str(TASK), name="scale_shift")
    task = TaskContext("scale_shift", TASK.read_text(), analyze(str(TASK), small=True, arch="cpu").to_json(),
                       device="cpu", arch="cpu")
    store = RunStore(tmp_path / "run.sqlite")
    run_id = store.create_run(str(TASK), config.to_json())
    lines: list[str] = []
    with ScriptedOpenAI(script) as server, LocalExecutor() as executor, \
            KnowledgeStore(tmp_path / "kb") as knowledge:
        chat = ChatClient(LLMConfig(model="scripted-model", api_key=server.key, base_url=server.url))
        op = LLMOperator(chat, config, executor, spec, knowledge)
        run = Run(config=config, run_id=run_id, task=task, spec=spec, executor=executor, policy=GreedyPolicy(),
                  operators=[op], store=store, knowledge=knowledge, say=lines.append)
        final = run_search(run, [], [])
        written = [m for _, m in knowledge.items("kernel") if m.get("run") == run_id]

    # stored as evaluated, with lineage, strategy and prompt
    assert final.stop == "evaluation budget of 2 spent"
    first, second = RunStore(tmp_path / "run.sqlite").archive(run_id)
    assert (first.result.verdict, second.result.verdict) == ("incorrect", "correct")
    assert first.source == WRONG and second.source == GOOD and second.parent_id == first.id
    assert first.operator == second.operator == "llm" and first.strategy and second.strategy
    assert "Reference (PyTorch)" in store.prompt(run_id, second.id)
    assert store.run(run_id).status == "finished"

    # retrieval: verified kernels in the first prompt, and the search_knowledge tool answered from Chroma
    assert "Similar verified kernels" in messages_text(server.requests[0])
    tool_replies = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_replies[0].startswith("There is no parent yet") and tool_replies[1].startswith("## ")
    assert op.searches == 1

    # the failure of round 1 is in round 2's prompt, which starts from it as the parent
    round2 = messages_text(server.requests[3])
    assert "Parent kernel #1" in round2 and first.result.reason in round2
    # test_kernel ran the evaluator on the draft
    assert "verdict: correct" in messages_text(server.requests[4]) and op.draft_evals == 1
    assert len(server.requests) == 5

    assert any(line.startswith("[1/2] #1 llm: incorrect") for line in lines)
    assert any(line.startswith("[2/2] #2 llm <- #1: correct") for line in lines)
    assert [m["candidate"] for m in written] == [2]  # the new best went back to the knowledge store
