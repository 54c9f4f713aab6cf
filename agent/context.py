"""What a search run is configured with (RunConfig) and what it runs with (Run).

RunConfig is plain data, stored with the run so that `--resume` continues under the same settings.
Run bundles the live parts a graph node needs: the task, the executor, the operators, the policy,
the run store, the knowledge store. It is the LangGraph runtime context of agent/graph.py.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from typing import Callable

from agent.interfaces import Executor, KnowledgeStore, Operator, SelectionPolicy, TaskContext
from agent.runstore import RunStore
from tools.results import TaskSpec


def _d(default, description: str, **kw):
    return field(default=default, metadata={"description": description}, **kw)


@dataclass(kw_only=True)
class RunConfig:
    """The settings of one search run."""

    budget: int = _d(24, "Candidates to evaluate in the whole run (resumed runs included).")
    time_limit_s: float = _d(1800.0, "Wall-clock seconds for this session of the run; checked between rounds.")
    policy: str = _d("greedy", "Parent selection: greedy, tree (UCB over the lineage) or map-elites.")
    model: str | None = _d(None, "Model name at the OpenAI-compatible endpoint; None: no LLM operator.")
    base_url: str | None = _d(None, "Endpoint URL; None: OPENAI_BASE_URL, else the OpenAI default.")
    seed: int = _d(0, "Seed of every random choice the search makes (policy sampling, strategy mutation).")
    plateau: int = _d(12, "Stop after this many evaluations without a better candidate; 0: never.")
    floor_margin: float = _d(0.10, "Stop once the best is within this fraction of the speed-of-light "
                                   "floor, i.e. floor_fraction >= 1/(1+margin), and not slower than "
                                   "torch.compile.")
    batch_size: int = _d(2, "Proposals per round, evaluated together by the executor.")
    parents: int = _d(2, "Parents the policy selects per round; proposals are shared among them.")
    small: bool = _d(False, "Evaluate on the task's SMALL_SHAPES even on a GPU (always on a CPU).")
    dtype: str | None = _d(None, "Cast the task's floating inputs and parameters (float32, bfloat16, float16); "
                                 "None: the task's own.")
    eval_timeout_s: float = _d(300.0, "Seconds one evaluation may take before its worker is killed.")
    trials: int = _d(4, "Timing trials per evaluation.")
    deep: int | None = _d(None, "Deep input sets of the final check of the best kernel, beside its trials from a "
                                "fresh seed (agent/optimize.py: final_check); None: 16 on a GPU, 2 on a CPU; 0: "
                                "the trials only.")
    trial_seed: int | None = _d(None, "Trial seed of every evaluation, to replay a run's verification exactly; "
                                      "None: a fresh one from the operating system for each evaluation.")
    k_docs: int = _d(4, "Hardware and optimization documents retrieved into each prompt.")
    k_kernels: int = _d(3, "Similar verified kernels retrieved into each prompt.")
    prompt_chars: int = _d(24000, "Character budget of one proposal prompt; sections are cut to fit.")
    max_turns: int = _d(12, "Model replies one LLM proposal may take (tool calls included).")
    max_draft_evals: int = _d(3, "Evaluator runs (test_kernel / profile_kernel) one LLM proposal may ask for.")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "RunConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def describe(cls) -> dict[str, str]:
        return {f.name: f.metadata["description"] for f in fields(cls)}


@dataclass
class Run:
    """The live components of a run, passed whole to every node of the search graph."""

    config: RunConfig
    run_id: str
    task: TaskContext
    spec: TaskSpec
    executor: Executor
    policy: SelectionPolicy
    operators: list[Operator]
    store: RunStore
    knowledge: KnowledgeStore | None = None
    say: Callable[[str], None] = print  # progress lines
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started
