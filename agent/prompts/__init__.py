"""Prompt templates for the LLM operator, rendered with strict undefined variables.

One render function per template: render_system (system.j2), render_proposal (proposal.j2),
render_nudge (nudge.j2). strategies.md holds the strategy snippets meta-prompt evolution recombines.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import jinja2

from agent.interfaces import Retrieved

HERE = Path(__file__).parent


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


@lru_cache(maxsize=1)
def load_strategies() -> dict[str, str]:
    """The strategy snippets of strategies.md, key -> text (whitespace folded to one line)."""
    text = (HERE / "strategies.md").read_text()
    parts = re.split(r"^## +(\S+)\s*$", text, flags=re.M)
    return {key: " ".join(body.split()) for key, body in zip(parts[1::2], parts[2::2])}


def render_system(strategy: str, tools: list[tuple[str, str]], max_draft_evals: int) -> str:
    return _env().get_template("system.j2").render(strategy=strategy, tools=tools,
                                                   max_draft_evals=max_draft_evals)


def render_nudge(problem: str, left: int) -> str:
    return _env().get_template("nudge.j2").render(problem=problem, left=left)


@dataclass
class ParentView:
    id: int
    source: str
    verdict: str
    reason: str
    profile: list[str]  # timing, floor fraction, registers/spills, suggested bottleneck


@dataclass
class ProposalPrompt:
    """Everything proposal.j2 shows, before it is cut to the character budget."""

    task_name: str
    device: str
    task_source: str
    analysis: list[str] = field(default_factory=list)
    parent: ParentView | None = None
    siblings: list[str] = field(default_factory=list)  # errors of failed attempts, newest first
    kernels: list[Retrieved] = field(default_factory=list)
    docs: list[Retrieved] = field(default_factory=list)


def _render_proposal(p: ProposalPrompt) -> str:
    return _env().get_template("proposal.j2").render(
        task_name=p.task_name, device=p.device, task_source=p.task_source, analysis=p.analysis,
        parent=p.parent, siblings=p.siblings, kernels=p.kernels, docs=p.docs)


def _cut(text: str, by: int) -> str:
    keep = max(0, len(text) - by - 40)
    return text[:keep] + f"\n... [{len(text) - keep} characters cut]"


def render_proposal(prompt: ProposalPrompt, budget_chars: int) -> str:
    """Renders proposal.j2 within budget_chars: drops docs, then retrieved kernels, then older sibling
    errors, and only then cuts the longest of the task source, the parent and the first sibling error."""
    p = replace(prompt, docs=list(prompt.docs), kernels=list(prompt.kernels), siblings=list(prompt.siblings))
    while True:
        text = _render_proposal(p)
        over = len(text) - budget_chars
        if over <= 0:
            return text
        if p.docs:
            p.docs.pop()
        elif p.kernels:
            p.kernels.pop()
        elif len(p.siblings) > 1:
            p.siblings.pop()
        else:
            sizes = {"task": len(p.task_source), "parent": len(p.parent.source) if p.parent else 0,
                     "sibling": len(p.siblings[0]) if p.siblings else 0}
            longest = max(sizes, key=sizes.get)
            if sizes[longest] <= 200:
                return text[:budget_chars]
            if longest == "task":
                p.task_source = _cut(p.task_source, over)
            elif longest == "parent":
                p.parent = replace(p.parent, source=_cut(p.parent.source, over))
            else:
                p.siblings = [_cut(p.siblings[0], over)]
