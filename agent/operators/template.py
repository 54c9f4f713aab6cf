"""The template operator: complete Triton candidates from the parameterized templates, no model needed.

    op = TemplateOperator()
    proposals = op.propose(task, parents=[], n=4)   # defaults first, then structural variants

Each proposal's params are {"template": name, **parameters}, so ParamOperator can mutate it later. A task
no template covers yields no proposals and `last_reason` says why. Where the rewrite pass changed the task's
program (agent/templates/rewrite.py), the rewritten program and the original are both offered: each proposal's
params then carry "rewrites", the rules its program used ([] for the original), and its note says them too.
"""
from __future__ import annotations

import hashlib

from agent.analysis import TaskAnalysis, analyze
from agent.interfaces import Individual, Proposal, TaskContext
from agent.templates import BY_NAME, base, matching, unsupported_reason
from agent.templates.ir import Program, Unsupported, is_original, lower, original

_ANALYSES: dict[tuple, TaskAnalysis] = {}


def analysis_of(task: TaskContext) -> TaskAnalysis:
    """The task re-analyzed at the shapes its stored analysis used (the templates need the traced module,
    which the JSON form does not carry). Cached per source and shapes."""
    stored = task.analysis or {}
    small = bool(stored.get("small", task.arch == "cpu"))
    shapes = dict(stored.get("shapes") or {})
    shape_sets = list(stored.get("shape_sets") or [])
    key = (hashlib.sha256(task.source.encode()).hexdigest(), small, tuple(sorted(shapes.items())),
           bool(stored.get("tf32", False)), stored.get("dtype"), task.arch, repr(shape_sets))
    if key not in _ANALYSES:  # arch "cpu": the evaluator is Triton's interpreter (base.default_operands)
        arch = task.arch if task.arch.startswith("sm_") or task.arch == "cpu" else "sm_90"
        _ANALYSES[key] = analyze(task.source, small=small, shapes=shapes, arch=arch,
                                 tf32=bool(stored.get("tf32", False)), name=task.name, dtype=stored.get("dtype"))
        _ANALYSES[key].shape_sets = shape_sets
    return _ANALYSES[key]


def config_key(params: dict) -> str:
    return repr(sorted(params.items()))


def kernel_text(source: str) -> str:
    """A candidate without its parameter comment: two configurations that render the same kernels (a
    parameter the template clamps or ignores) have the same kernel text."""
    return "\n".join(line for line in source.splitlines() if not line.startswith("# --- Triton candidate"))


def lowered(analysis: TaskAnalysis) -> Program | None:
    """The program the templates build from (agent/templates/ir.py), or None where the task does not lower."""
    try:
        return lower(analysis)
    except Unsupported:
        return None


def programs(analysis: TaskAnalysis) -> list[TaskAnalysis]:
    """The analyses the templates build from: the task's (its program rewritten where the rewrite pass kept a
    rewrite), and where it did, also `original(analysis)`, whose program is the one traced."""
    program = lowered(analysis)
    return [analysis, original(analysis)] if program is not None and program.rewrites else [analysis]


def rewrite_note(analysis: TaskAnalysis) -> str:
    """What the rewrite pass (agent/templates/rewrite.py) did to the program a template is built from: the rules
    that fired, that the program is the original one beside a rewritten one, or why a rewrite found was not
    used; "" when none applied or the task does not lower."""
    program = lowered(analysis)
    if program is None:
        return ""
    if program.rewrites:
        return f"; rewrites: {', '.join(program.rewrites)}"
    if is_original(analysis):
        return "; rewrites: none (the original program, beside the rewritten one)"
    return f"; {program.rewrite_refused}" if program.rewrite_refused else ""


def rewrite_params(analysis: TaskAnalysis) -> dict:
    """{"rewrites": rules} for a task whose program was rewritten: the rules the program built from `analysis`
    used, [] for the original; {} for a task with no rewrite."""
    program = lowered(analysis)
    if program is None or not (program.rewrites or is_original(analysis)):
        return {}
    return {"rewrites": list(program.rewrites)}


def make_proposal(analysis: TaskAnalysis, template: str, params: dict, operator: str, note: str) -> Proposal:
    """The candidate of these parameters. A task verified at more shape sets (`--shapes`) gets shape-general
    kernels where the plan has them (params["shapes"] = "dynamic"); elsewhere the kernel is built for the task's
    own shapes, and the evaluator reports it taking the fallback at the others."""
    t = BY_NAME[template]
    if analysis.shape_sets and "shapes" not in params and base.invalid(analysis, {**params, "shapes": "dynamic"}) \
            is None:
        params = {**params, "shapes": "dynamic"}
    source = t.render(analysis, params)
    note += rewrite_note(analysis)
    return Proposal(source=source, operator=operator, params={"template": template, **params,
                                                              **rewrite_params(analysis)},
                    features=base.features(analysis, params), note=note)


def exact_logs(plans: list, parents: list[Individual]) -> list[tuple]:
    """(analysis, template, params) of each template candidate the evaluator found incorrect whose logs were
    the SFU's (base.LOGS): the same configuration with tl.log, tried before any new one, since the SFU's log has
    no relative accuracy near 1 and a task may need it there."""
    out = []
    for parent in parents:
        p = parent.params
        if parent.result is None or parent.result.verdict != "incorrect" or p.get("logs", base.LOGS[0]) != "sfu":
            continue
        for a, t in plans:
            if t.NAME == p.get("template") and rewrite_params(a).get("rewrites") == p.get("rewrites") and \
                    "logs" in t.space(a):
                params = {k: v for k, v in p.items() if k not in ("template", "rewrites")}
                out.append((a, t.NAME, {**params, "logs": "libdevice"}))
    return out


class TemplateOperator:
    name = "template"

    def __init__(self, variants: bool = True):
        self.variants = variants
        self.proposed: set[str] = set()  # kernel texts already proposed in this run
        self.last_reason: str | None = None

    def propose(self, task: TaskContext, parents: list[Individual], n: int) -> list[Proposal]:
        try:
            analyses = programs(analysis_of(task))
            plans = [(a, t) for a in analyses for t in matching(a)]
            self.last_reason = None if plans else unsupported_reason(analyses[0])
        except Exception as e:  # a task the tracer or the templates choke on: no proposals, and why
            self.last_reason = f"the templates could not plan this task ({type(e).__name__}: {e})"[:300]
            return []
        seen = self.proposed | {kernel_text(p.source) for p in parents}
        queues = [exact_logs(plans, parents)] + [[(a, t.NAME, p) for p in (t.variants(a) if self.variants else
                                                                          [t.default(a)])] for a, t in plans]
        out: list[Proposal] = []
        while len(out) < n and any(queues):
            for queue in queues:  # round-robin: every matching template's default, per program, before any variant
                if not queue or len(out) >= n:
                    continue
                analysis, name, params = queue.pop(0)
                if base.invalid(analysis, params):
                    continue
                kind = "default" if params == BY_NAME[name].default(analysis) else "variant"
                note = f"{name} template, {kind} configuration"
                if queue is queues[0]:
                    note = f"{name} template, an incorrect candidate's configuration with tl.log (logs sfu->libdevice)"
                try:
                    proposal = make_proposal(analysis, name, params, self.name, note)
                except Exception as e:
                    self.last_reason = f"the {name} template failed to render ({type(e).__name__}: {e})"[:300]
                    continue
                text = kernel_text(proposal.source)
                if text in seen:
                    continue
                seen.add(text)
                self.proposed.add(text)
                out.append(proposal)
        return out
