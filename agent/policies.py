"""Selection policies: which evaluated candidates become the parents of the next proposals.

  greedy      the best by fitness (the newest first among equals, so a fresh failure can be repaired)
  tree        UCB over the lineage: a node's value is the mean reward of its subtree, plus an
              exploration bonus that shrinks as the subtree grows
  map-elites  an archive of elites keyed by kernel behaviour (access pattern, block size class,
              launches, tensor cores); parents are drawn uniformly from the occupied cells so diverse
              strategies survive even when one of them is faster today

    policy = make_policy("tree", seed=0)
    parents = policy.select(archive, k=2)
"""
from __future__ import annotations

import math
import random
import re

from agent.interfaces import Individual, SelectionPolicy

POLICIES = ("greedy", "tree", "map-elites")


def _newest_first(archive: list[Individual], k: int) -> list[Individual]:
    """With nothing correct yet, the most recent candidates: their errors are the freshest feedback."""
    return sorted(archive, key=lambda i: -i.id)[:k]


class GreedyPolicy:
    name = "greedy"

    def select(self, archive: list[Individual], k: int) -> list[Individual]:
        if not any(i.fitness > 0 for i in archive):
            return _newest_first(archive, k)
        return sorted(archive, key=lambda i: (-i.fitness, -i.id))[:k]


class TreePolicy:
    """UCB1 over the lineage tree, with rewards normalized by the best fitness seen."""

    name = "tree"

    def __init__(self, exploration: float = 0.5):
        self.exploration = exploration

    def scores(self, archive: list[Individual]) -> dict[int, float]:
        best = max((i.fitness for i in archive), default=0.0)
        reward = {i.id: (i.fitness / best if best > 0 else 0.0) for i in archive}
        children: dict[int, list[int]] = {}
        for i in archive:
            if i.parent_id in reward:
                children.setdefault(i.parent_id, []).append(i.id)
        total: dict[int, float] = {}
        size: dict[int, int] = {}

        def visit(node: int) -> None:  # iterative post-order, lineages can be deep
            stack = [(node, False)]
            while stack:
                n, done = stack.pop()
                if done:
                    kids = children.get(n, [])
                    total[n] = reward[n] + sum(total[c] for c in kids)
                    size[n] = 1 + sum(size[c] for c in kids)
                elif n not in size:
                    stack.append((n, True))
                    stack.extend((c, False) for c in children.get(n, []))

        for i in archive:
            visit(i.id)
        log_n = math.log(len(archive) + 1)
        return {n: total[n] / size[n] + self.exploration * math.sqrt(log_n / size[n]) for n in size}

    def select(self, archive: list[Individual], k: int) -> list[Individual]:
        ucb = self.scores(archive)
        return sorted(archive, key=lambda i: (-ucb[i.id], -i.id))[:k]


class MapElitesPolicy:
    """Keeps the best correct candidate of each behaviour cell and samples parents among the cells."""

    name = "map-elites"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    @staticmethod
    def cell(ind: Individual) -> tuple[str, ...]:
        """The behaviour cell: the operator's descriptors where it gave them, else read from the source."""
        read = kernel_features(ind.source)
        return tuple(str(ind.features.get(k, read[k])) for k in DIMENSIONS)

    def elites(self, archive: list[Individual]) -> dict[tuple, Individual]:
        cells: dict[tuple, Individual] = {}
        for ind in archive:
            if ind.fitness <= 0:
                continue
            key = self.cell(ind)
            if key not in cells or ind.fitness > cells[key].fitness:
                cells[key] = ind
        return cells

    def select(self, archive: list[Individual], k: int) -> list[Individual]:
        elites = self.elites(archive)
        if not elites:
            return _newest_first(archive, k)
        keys = sorted(elites)
        return [elites[key] for key in self.rng.sample(keys, min(k, len(keys)))]


def make_policy(name: str, seed: int = 0) -> SelectionPolicy:
    if name == "greedy":
        return GreedyPolicy()
    if name == "tree":
        return TreePolicy()
    if name == "map-elites":
        return MapElitesPolicy(seed)
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")


# --- behaviour descriptors --------------------------------------------------------------------
DIMENSIONS = ("access", "block_class", "launches", "tensor_cores")  # as agent/templates/base.py names them
_BLOCK = re.compile(r"\bBLOCK\w*['\"]?\s*[:=]\s*(?:tl\.constexpr\s*=\s*)?(\d+)")
_LAUNCH = re.compile(r"\b\w+\[[^\[\]]+\]\s*\(")
_LOOP = re.compile(r"\bfor\s+\w+\s+in\s+(?:tl\.)?(?:static_)?range\(")


def kernel_features(source: str) -> dict:
    """The MAP-Elites dimensions of a Triton candidate, read from its source (for candidates whose
    operator gave none, such as the LLM's): memory access pattern, block size class, kernel launches,
    tensor cores."""
    blocks = [int(b) for b in _BLOCK.findall(source)]
    biggest = max(blocks, default=0)
    access = "tiled_gemm" if "tl.dot" in source else "looped" if _LOOP.search(source) else "one_pass"
    return {"access": access,
            "block_class": "small" if biggest <= 64 else "medium" if biggest <= 1024 else "large",
            "launches": len(_LAUNCH.findall(source)),
            "tensor_cores": "tl.dot" in source}
