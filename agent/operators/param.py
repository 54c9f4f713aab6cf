"""The parameter operator: a stochastic search over template parameters that learns from measured results.

    op = ParamOperator(seeds=[{"template": "rowwise", "mode": "looped", "BLOCK_R": 4096}])
    op.observe(archive)                           # any evaluated candidates (the search calls this each round)
    proposals = op.propose(task, parents, n=4)

Known-good configurations (`seeds`, e.g. retrieved from the knowledge store for similar shapes on the same arch) are
tried first: one stored by a run of this very task (its SEED_TASK) as it is, wherever its plan takes it, so that a
rerun starts from its last winner; another fitted to this task's space. After that each proposal mutates one to
three parameters of a base configuration: usually the best measured one, otherwise a parent. Values are picked by an
upper confidence bound on their mean normalized fitness (fitness / the template's best, 0 for incorrect or crashed
candidates) over everything observed, so values that were fast are chosen more often and untried values get a
chance; ordered numeric parameters mostly move to a neighbouring value. Configurations already proposed or evaluated
are never proposed again, nor are ones the template rejects (too many registers, shared memory). About half the
proposals (NEIGHBOURS) are instead the fittest configuration's untried one-parameter moves, in a random order: a
value's pooled fitness counts every configuration it ran in, so a stage count that was slow in other tiles is
otherwise seldom tried in the fittest one (level 1's 79: 24 evaluations, none of its 128 x 32 interleaved tiles at 3
stages).

Where the rewrite pass kept a rewrite, each configuration is tuned on the program it was built from (its
params' "rewrites": the rewritten one, or the original beside it), so a task whose original program is the
faster one tunes that.

A template's parameters tune its main kernel (the one with the most work). Where the best measured candidate's
profile (EvalResult.kernel_ms, on a GPU) shows another Triton kernel taking the most device time, a share of
the proposals (FOCUS) retune that kernel instead, through the template's per-kernel parameters
(params["kernels"], agent/templates/base.py: overrides): a network's search spends itself where its time goes.

Before either, a share of the proposals (ROOFLINE) are the structural moves that the fittest candidate with a GPU
timing calls for (agent/operators/roofline.py: its gap to the floor, kind of bound, device time per kernel and
compile metadata), each note saying why; none once that candidate is at its floor. A move is the parameters it
changes; one that ran more than LOSS slower than the candidate it was made from is not made again from a later
fittest candidate, nor is any move that makes all its changes (level 1's 79, 23 evaluations on an H200: 14 were
roofline moves, the same few made again from each new fittest candidate one parameter away from the last, each
1.06-4.6x slower than its origin).
"""
from __future__ import annotations

import dataclasses
import math
import random

from agent.interfaces import Individual, Proposal, TaskContext
from agent.operators import roofline
from agent.operators.template import analysis_of, config_key, kernel_text, make_proposal, programs, rewrite_params
from agent.templates import BY_NAME, base, matching
from agent.templates.ir import Unsupported
from agent.templates.params import kernel_default, kernel_space

FOCUS = 0.5  # the share of proposals that retune the kernel with the most device time, where it is not the main one
ROOFLINE = 0.5  # the share of proposals (at least one) taken from the roofline's structural moves while they last
LOSS = 0.9  # a roofline move whose candidate ran under this share of its origin's speed is not made again
NEIGHBOURS = 0.5  # the chance that a proposal is the next untried one-parameter move of the fittest configuration


PLAN_FORMS = ("kernels", "stats", "recompute")  # kept by refit: no template's space lists them
SEED_TASK = "seed_task"  # a seed's key naming the task whose run stored it (agent/optimize.param_seeds)


class ParamOperator:
    name = "param"

    def __init__(self, seeds: list[dict] | None = None, seed: int = 0, explore: float = 0.2,
                 exploit_best: float = 0.7, confidence: float = 0.5):
        self.rng = random.Random(seed)
        self.seeds = [dict(s) for s in (seeds or [])]
        self.explore = explore  # chance of a uniformly random value
        self.exploit_best = exploit_best  # chance of mutating the best measured config rather than a parent
        self.confidence = confidence  # weight of the UCB exploration bonus
        self.results: dict[str, tuple[dict, float]] = {}  # config key -> (params, best fitness seen)
        self.proposed: set[str] = set()  # config keys proposed or rejected, never proposed again
        self.sources: set[str] = set()
        self.last_reason: str | None = None
        self.measured: Individual | None = None  # the fittest evaluated candidate with a GPU timing (on a GPU a
        # correct candidate also has its device time per kernel)
        self.analyses: list = []  # the task's programs (agent/operators/template.py: programs), set by propose
        self.homes: dict = {}  # template name -> the program it is tried on first (the rewritten one where both)
        self.moved: dict[str, tuple[tuple, str]] = {}  # a roofline move's config key -> (its changes, origin's key)

    # --- learning ----------------------------------------------------------------------------------
    def observe(self, individuals: list[Individual]) -> None:
        """Records the measured fitness of evaluated candidates that carry template parameters."""
        for ind in individuals:
            if ind.result is None or "template" not in ind.params:
                continue
            key = config_key(ind.params)
            old = self.results.get(key, (None, -1.0))[1]
            self.results[key] = (dict(ind.params), max(old, ind.fitness))
            self.proposed.add(key)
            self.sources.add(kernel_text(ind.source))
            timing = ind.result.timing
            if timing is not None and not timing.interpreted and ind.fitness > 0 \
                    and (self.measured is None or ind.fitness > self.measured.fitness):
                self.measured = ind

    def stats(self, template: str) -> dict[tuple[str, object], tuple[float, int]]:
        """(param, value) -> (mean normalized fitness, count) over the observed configs of a template."""
        rows = [(p, f) for p, f in self.results.values() if p.get("template") == template]
        best = max((f for _, f in rows), default=0.0)
        acc: dict[tuple[str, object], list[float]] = {}
        for params, fitness in rows:
            score = fitness / best if best > 0 else 0.0
            for k, v in params.items():
                if k != "template":
                    acc.setdefault((k, _hashable(v)), []).append(score)
        return {key: (sum(s) / len(s), len(s)) for key, s in acc.items()}

    def best(self, template: str) -> dict | None:
        rows = [(p, f) for p, f in self.results.values() if p.get("template") == template and f > 0]
        return dict(max(rows, key=lambda r: r[1])[0]) if rows else None

    # --- proposing ---------------------------------------------------------------------------------
    def propose(self, task: TaskContext, parents: list[Individual], n: int) -> list[Proposal]:
        try:
            self.analyses = programs(analysis_of(task))
            self.homes = {t.NAME: a for a in reversed(self.analyses) for t in matching(a)}
            templates = {name: BY_NAME[name] for name in self.homes}
        except Exception as e:  # a task the tracer or the templates choke on: no proposals, and why
            self.last_reason = f"the templates could not plan this task ({type(e).__name__}: {e})"[:300]
            return []
        if not templates:
            return []
        self.observe(parents)
        out: list[Proposal] = []
        while self.seeds and len(out) < n:
            seed = self.seeds.pop(0)  # a copy (__init__)
            name = seed.get("template") if seed.get("template") in templates else next(iter(templates))
            stored_for = seed.pop(SEED_TASK, None)
            if stored_for and stored_for == task.name:  # this task's own winner, on the program it was built from
                params = self.refit(self.program(seed), templates[name], seed)
            else:  # a similar task's, fitted to this one
                params = {**self.fit(self.homes[name], templates[name], seed), **rewrite_params(self.homes[name])}
            self.add(name, params, out, "known-good configuration")
        quota = len(out) + max(1, math.ceil(ROOFLINE * n))
        for move, changes in self.structural(task, templates):
            if len(out) >= min(n, quota):
                break
            origin = f"candidate {self.measured.id}" if move.kernel is None else \
                f"kernel {move.kernel}, the most device time in candidate {self.measured.id}"
            name = self.measured.params["template"]
            self.moved[self.key(name, move.params)] = (changes, config_key(self.measured.params))
            self.add(name, move.params, out, f"roofline: {move.reason} (from {origin})")
        hot = self.hottest(templates)
        near = self.neighbours(templates)
        for _ in range(40 * n):
            if len(out) >= n:
                break
            if hot is not None and self.rng.random() < FOCUS:
                name, start, i = hot
                child, note = self.retune(start, i)
                origin = f"kernel {i}, the most device time in candidate {self.measured.id}"
            elif near and self.rng.random() < NEIGHBOURS:
                name, child, note = near.pop()
                origin = "best measured, one parameter"
            else:
                name, start, origin = self.pick_base(templates, parents)
                child, changes = self.mutate(self.program(start), templates[name], start)
                note = ", ".join(f"{k} {start.get(k)}->{v}" for k, v in changes.items())
            if note:
                self.add(name, child, out, f"{note} (from {origin})")
        return out

    def program(self, params: dict):
        """The analysis a configuration is built from: the one whose program used its "rewrites" (the original's
        where they are [] beside a rewritten one), else the task's."""
        wanted = params.get("rewrites")
        return next((a for a in self.analyses if rewrite_params(a).get("rewrites") == wanted), self.analyses[0])

    def structural(self, task: TaskContext, templates: dict) -> list[tuple[roofline.Move, tuple]]:
        """The roofline's structural moves from the fittest candidate with a GPU timing (none without one), each
        with the parameters it changes; none that makes every change of a move that lost before (lost)."""
        best = self.measured
        name = best.params.get("template") if best is not None else None
        if name not in templates:
            return []
        a = self.program(best.params)
        params = self.refit(a, templates[name], best.params)
        try:
            found = [dataclasses.replace(m, params={**m.params, **_program_of(params)}) for m in
                     roofline.moves(a, templates[name], _bare(params), best.result, task.analysis)]
        except (Unsupported, ValueError) as e:  # a configuration this plan no longer takes: random moves only
            self.last_reason = f"no roofline moves ({type(e).__name__}: {e})"[:300]
            return []
        lost = self.lost()
        return [(m, _changes(params, m.params)) for m in found if not _repeats(m.params, lost)]

    def lost(self) -> set[tuple]:
        """The changes of the roofline moves whose candidate ran under LOSS times the speed of the one it was
        made from."""
        fit = {key: f for key, (_, f) in self.results.items()}
        return {changes for key, (changes, origin) in self.moved.items()
                if key in fit and origin in fit and fit[key] < LOSS * fit[origin]}

    def neighbours(self, templates: dict) -> list[tuple[str, dict, str]]:
        """(template, params, move) of the fittest correct configuration's one-parameter moves not yet proposed,
        shuffled: an ordered number one step either way, any other parameter to each of its other values."""
        rows = [(p, f) for p, f in self.results.values() if p.get("template") in templates and f > 0]
        if not rows:
            return []
        best = max(rows, key=lambda r: r[1])[0]
        name, a = best["template"], self.program(best)
        start = self.refit(a, templates[name], best)
        out = []
        for k, choices in templates[name].space(a).items():
            current = start.get(k)
            if current in choices and all(isinstance(c, (int, float)) for c in choices):
                i = choices.index(current)
                values = [choices[j] for j in (i - 1, i + 1) if 0 <= j < len(choices)]
            else:
                values = [c for c in choices if c != current]
            out += [(name, {**start, k: v}, f"{k} {current}->{v}") for v in values
                    if self.key(name, {**start, k: v}) not in self.proposed]
        self.rng.shuffle(out)
        return out

    def key(self, name: str, params: dict) -> str:
        """The configuration's key as add() records it: its template, its parameters and its program."""
        return config_key({"template": name, **_bare(params), **rewrite_params(self.program(params))})

    def hottest(self, templates: dict) -> tuple[str, dict, int] | None:
        """(template, the measured candidate's params, index) of the Triton kernel that took the most device time
        in the fittest measured candidate, where that is not its template's main kernel; None otherwise."""
        best = self.measured
        name = best.params.get("template") if best is not None and best.result.kernel_ms else None
        if name not in templates:
            return None
        a = self.program(best.params)
        params = self.refit(a, templates[name], best.params)
        try:
            pl = base.plan(a, _bare(params))
        except Exception:
            return None
        i = roofline.hot_kernel(pl, best.result.kernel_ms)
        return None if i == pl.primary else (name, params, i)

    def retune(self, start: dict, i: int) -> tuple[dict, str]:
        """`start` with one or two of kernel i's own parameters moved (params["kernels"]), and the moves in words
        ("" when there is nothing to move)."""
        kernel = base.plan(self.program(start), _bare(start)).kernels[i]
        space = {k: v for k, v in kernel_space(kernel).items() if len(v) > 1}
        if not space:
            return dict(start), ""
        tuned = dict(start.get("kernels", {}))
        current = {**kernel_default(kernel), **tuned.get(str(i), {})}
        changes = {}
        for k in self.rng.sample(sorted(space), min(len(space), self.rng.choice([1, 1, 2]))):
            value = self.choose(k, space[k], current.get(k), {}, 0)
            if value != current.get(k):
                changes[k] = value
        tuned[str(i)] = dict(sorted({**tuned.get(str(i), {}), **changes}.items()))
        child = {**start, "kernels": dict(sorted(tuned.items()))}
        return child, ", ".join(f"kernel {i} {k} {current.get(k)}->{v}" for k, v in changes.items())

    def add(self, name: str, params: dict, out: list[Proposal], note: str) -> None:
        analysis = self.program(params)
        key = self.key(name, params)
        params = _bare(params)
        if key in self.proposed:
            return
        self.proposed.add(key)
        if base.invalid(analysis, params):
            return
        try:
            proposal = make_proposal(analysis, name, params, self.name, f"param search: {note}")
        except Exception as e:
            self.last_reason = f"the {name} template failed to render ({type(e).__name__}: {e})"[:300]
            return
        text = kernel_text(proposal.source)
        if text in self.sources:  # a parameter the template clamps away: same kernels
            return
        self.sources.add(text)
        out.append(proposal)

    def fit(self, analysis, template, params: dict) -> dict:
        """A configuration from elsewhere (another shape, an older template) made valid for this space:
        unknown keys dropped, missing ones defaulted, numbers moved to the nearest available choice."""
        space, out = template.space(analysis), dict(template.default(analysis))
        for k, v in params.items():
            if k not in space:
                continue
            choices = space[k]
            if v in choices:
                out[k] = v
            elif isinstance(v, (int, float)) and all(isinstance(c, (int, float)) for c in choices):
                out[k] = min(choices, key=lambda c: abs(math.log2(max(c, 1)) - math.log2(max(v, 1))))
        return out

    def refit(self, analysis, template, params: dict) -> dict:
        """A configuration of this run, as it is where this plan takes it: a variant's values that no space
        lists and the keys it leaves out are its own. fit() had filled and moved them, so that every move from
        it changed more than it said (on an H200, level 1's 59: a register cap from channel tiles, whose
        variant names no tiles, also set the space's default streamed ones, 1.07 -> 2.07 ms; level 1's 75:
        512 rows set to 256). Else fit(), its per-kernel parameters (which name this plan's kernels) kept, and
        the plan-wide forms no space lists (a norm's statistics in its convolution's epilogue, that
        convolution run twice), which its variants and the roofline's moves set, and the program it was built
        from ("rewrites")."""
        own = {k: v for k, v in params.items() if k != "template"}
        if base.invalid(analysis, _bare(own)) is None:
            return own
        out = self.fit(analysis, template, params)
        out.update({k: params[k] for k in PLAN_FORMS + ("rewrites",) if k in params})
        return out

    def pick_base(self, templates: dict, parents: list[Individual]) -> tuple[str, dict, str]:
        ours = [p for p in parents if p.params.get("template") in templates]
        name = self.rng.choice(sorted(templates))
        if ours and (self.rng.random() > self.exploit_best or self.best(ours[0].params["template"]) is None):
            parent = self.rng.choice(ours)
            name = parent.params["template"]
            return name, self.refit(self.program(parent.params), templates[name], parent.params), \
                f"parent {parent.id}"
        if ours:
            name = max(ours, key=lambda p: p.fitness).params["template"]
        best = self.best(name)
        if best is not None:
            return name, self.refit(self.program(best), templates[name], best), "best measured"
        home = self.homes[name]
        return name, {**templates[name].default(home), **rewrite_params(home)}, "default"

    def mutate(self, analysis, template, start: dict) -> tuple[dict, dict]:
        space = {k: v for k, v in template.space(analysis).items() if len(v) > 1}
        if not space:
            return dict(start), {}
        stats = self.stats(template.NAME)
        total = sum(c for _, c in stats.values())
        count = min(len(space), self.rng.choices([1, 2, 3], weights=[6, 3, 1])[0])
        child, changes = dict(start), {}
        for k in self.rng.sample(sorted(space), count):
            value = self.choose(k, space[k], start.get(k), stats, total)
            if value != start.get(k):
                child[k] = value
                changes[k] = value
        return child, changes

    def choose(self, key: str, choices: list, current, stats: dict, total: int):
        options = [c for c in choices if c != current]
        if self.rng.random() < self.explore:
            return self.rng.choice(options)
        ordered = current in choices and all(isinstance(c, (int, float)) for c in choices)
        if ordered and self.rng.random() < 0.6:
            i = choices.index(current)
            options = [choices[j] for j in (i - 2, i - 1, i + 1, i + 2) if 0 <= j < len(choices)]

        def ucb(value) -> float:
            mean, count = stats.get((key, _hashable(value)), (0.6, 0))
            return mean + self.confidence * math.sqrt(math.log(total + 2) / (count + 1)) + 1e-6 * self.rng.random()

        return max(options, key=ucb)


def _bare(params: dict) -> dict:
    """A configuration as its template takes it: without the program it was built from."""
    return {k: v for k, v in params.items() if k != "rewrites"}


def _program_of(params: dict) -> dict:
    return {"rewrites": params["rewrites"]} if "rewrites" in params else {}


def _repeats(params: dict, lost: set[tuple]) -> bool:
    """Whether a move to `params` makes every change of one that lost: the same move, whatever else it sets back
    to a default its origin had changed (level 1's 79 on an H200: channel tiles, 1.37 ms against 0.86, made again
    from a candidate one GROUP_M away, which the move set back to 8, and 1.43 ms)."""
    settings = {(k, repr(v)) for k, v in params.items()}
    return any(set(changes) <= settings for changes in lost)


def _changes(start: dict, params: dict) -> tuple:
    """What `params` sets that `start` does not have, in a stable order."""
    return tuple(sorted((k, repr(v)) for k, v in params.items() if start.get(k) != v))


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value
