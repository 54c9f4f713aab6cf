"""The run store: every candidate of a search, in SQLite, written as it happens.

Two tables. `runs` holds one row per search (task, configuration, status, why it stopped).
`candidates` holds one row per proposal: written when it is proposed (status 'proposed'), then
completed with its verdict and metrics the moment its evaluation returns (status 'evaluated').
A killed run therefore resumes from the store alone: the evaluated rows are the archive, and the
'proposed' rows are evaluated once, before anything new is proposed.

    store = RunStore("runs/x/run.sqlite")
    run_id = store.create_run("tasks/relu.py", {"budget": 8})
    ind = store.add_proposed(run_id, proposal, parent_id=None)
    store.record_result(run_id, ind.id, result)
    store.lineage_dot(run_id)
"""
from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from agent.interfaces import Individual, Proposal
from tools.results import VERDICTS, EvalResult

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id          TEXT PRIMARY KEY,
    task_path   TEXT NOT NULL,
    config      TEXT NOT NULL,              -- the run configuration, JSON
    status      TEXT NOT NULL,              -- running | finished
    stop_reason TEXT NOT NULL DEFAULT '',
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS candidates (
    run_id       TEXT NOT NULL REFERENCES runs(id),
    id           INTEGER NOT NULL,
    parent_id    INTEGER,
    operator     TEXT NOT NULL,
    source       TEXT NOT NULL,
    params       TEXT NOT NULL,             -- JSON
    strategy     TEXT NOT NULL,             -- the meta-prompt it was produced under
    prompt       TEXT NOT NULL,             -- the prompt that produced it, if an LLM did
    features     TEXT NOT NULL,             -- JSON, behaviour descriptors
    note         TEXT NOT NULL,
    status       TEXT NOT NULL,             -- proposed | evaluated
    verdict      TEXT,
    reason       TEXT,
    fitness      REAL,
    metrics      TEXT,                      -- EvalResult.to_json(), JSON
    proposed_at  REAL NOT NULL,
    evaluated_at REAL,
    PRIMARY KEY (run_id, id)
);
"""


class RunNotFound(LookupError):
    pass


@dataclass
class RunRecord:
    id: str
    task_path: str
    config: dict
    status: str
    stop_reason: str
    created_at: float
    updated_at: float


class RunStore:
    """A SQLite file of runs and their candidates. Every write is committed before it returns."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    # --- runs -------------------------------------------------------------------------------
    def create_run(self, task_path: str, config: dict, run_id: str | None = None) -> str:
        run_id = run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        now = time.time()
        self.db.execute(
            "INSERT INTO runs (id, task_path, config, status, created_at, updated_at) VALUES (?,?,?,?,?,?)",
            (run_id, task_path, json.dumps(config, sort_keys=True), "running", now, now))
        return run_id

    def run(self, run_id: str) -> RunRecord:
        row = self.db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.path}")
        return RunRecord(row["id"], row["task_path"], json.loads(row["config"]), row["status"],
                         row["stop_reason"], row["created_at"], row["updated_at"])

    def runs(self) -> list[RunRecord]:
        ids = [r["id"] for r in self.db.execute("SELECT id FROM runs ORDER BY created_at")]
        return [self.run(i) for i in ids]

    def set_status(self, run_id: str, status: str, stop_reason: str = "") -> None:
        self.db.execute("UPDATE runs SET status = ?, stop_reason = ?, updated_at = ? WHERE id = ?",
                        (status, stop_reason, time.time(), run_id))

    # --- candidates -------------------------------------------------------------------------
    def add_proposed(self, run_id: str, proposal: Proposal, parent_id: int | None,
                     prompt: str = "") -> Individual:
        """Stores a proposal before it is evaluated and returns it as an Individual with its id."""
        with self.db:  # one transaction: the id is taken and the row written together
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM candidates WHERE run_id = ?",
                                  (run_id,)).fetchone()
            cand_id = int(row[0])
            self.db.execute(
                "INSERT INTO candidates (run_id, id, parent_id, operator, source, params, strategy, prompt,"
                " features, note, status, proposed_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, cand_id, parent_id, proposal.operator, proposal.source,
                 json.dumps(proposal.params, sort_keys=True), proposal.strategy, prompt,
                 json.dumps(proposal.features, sort_keys=True), proposal.note, "proposed", time.time()))
        return Individual(id=cand_id, source=proposal.source, operator=proposal.operator,
                          parent_id=parent_id, params=dict(proposal.params), strategy=proposal.strategy,
                          features=dict(proposal.features))

    def record_result(self, run_id: str, cand_id: int, result: EvalResult) -> None:
        """Completes a proposed candidate with its evaluation. Refuses to evaluate a candidate twice."""
        fitness = Individual(cand_id, "", "", None, result=result).fitness
        cur = self.db.execute(
            "UPDATE candidates SET status = 'evaluated', verdict = ?, reason = ?, fitness = ?, metrics = ?,"
            " evaluated_at = ? WHERE run_id = ? AND id = ? AND status = 'proposed'",
            (result.verdict, result.reason, fitness, json.dumps(result.to_json()), time.time(),
             run_id, cand_id))
        if cur.rowcount != 1:
            raise ValueError(f"candidate #{cand_id} of run {run_id} is not awaiting evaluation")

    def demote(self, run_id: str, cand_id: int, result: EvalResult, reason: str) -> None:
        """An evaluated candidate that failed a later check takes that check's result and `reason`: it is no
        longer correct, in this run or a resumed one."""
        cur = self.db.execute(
            "UPDATE candidates SET verdict = ?, reason = ?, fitness = 0, metrics = ? WHERE run_id = ? AND id = ?"
            " AND status = 'evaluated'",
            (result.verdict, reason, json.dumps(replace(result, reason=reason).to_json()), run_id, cand_id))
        if cur.rowcount != 1:
            raise ValueError(f"candidate #{cand_id} of run {run_id} has not been evaluated")

    def archive(self, run_id: str) -> list[Individual]:
        """The evaluated candidates, in the order they were proposed."""
        return [self._individual(r) for r in self._rows(run_id, "evaluated")]

    def pending(self, run_id: str) -> list[Individual]:
        """Candidates proposed but not yet evaluated (left over by an interrupted run)."""
        return [self._individual(r) for r in self._rows(run_id, "proposed")]

    def prompt(self, run_id: str, cand_id: int) -> str:
        row = self.db.execute("SELECT prompt FROM candidates WHERE run_id = ? AND id = ?",
                              (run_id, cand_id)).fetchone()
        return row["prompt"] if row else ""

    def counts(self, run_id: str) -> dict[str, int]:
        """Candidates by verdict (every verdict present, zeros included) plus 'proposed' still pending."""
        out = {v: 0 for v in VERDICTS}
        for row in self.db.execute(
                "SELECT COALESCE(verdict, 'proposed') AS v, COUNT(*) AS n FROM candidates WHERE run_id = ?"
                " GROUP BY v", (run_id,)):
            out[row["v"]] = row["n"]
        out.setdefault("proposed", 0)
        return out

    def _rows(self, run_id: str, status: str) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM candidates WHERE run_id = ? AND status = ? ORDER BY id",
                               (run_id, status)).fetchall()

    @staticmethod
    def _individual(row: sqlite3.Row) -> Individual:
        result = EvalResult.from_json(json.loads(row["metrics"])) if row["metrics"] else None
        return Individual(id=row["id"], source=row["source"], operator=row["operator"],
                          parent_id=row["parent_id"], params=json.loads(row["params"]),
                          strategy=row["strategy"], features=json.loads(row["features"]), result=result)

    # --- lineage ----------------------------------------------------------------------------
    def lineage(self, run_id: str) -> dict:
        """The lineage as a node/edge list: {"nodes": [...], "edges": [{"from": parent, "to": child}]}."""
        nodes, edges = [], []
        for row in self.db.execute("SELECT * FROM candidates WHERE run_id = ? ORDER BY id", (run_id,)):
            metrics = json.loads(row["metrics"]) if row["metrics"] else {}
            timing = metrics.get("timing") or {}
            nodes.append({"id": row["id"], "operator": row["operator"], "status": row["status"],
                          "verdict": row["verdict"], "fitness": row["fitness"], "ms": timing.get("ms"),
                          "floor_fraction": timing.get("floor_fraction"), "note": row["note"],
                          "params": json.loads(row["params"]), "features": json.loads(row["features"])})
            if row["parent_id"] is not None:
                edges.append({"from": row["parent_id"], "to": row["id"]})
        return {"run": run_id, "nodes": nodes, "edges": edges}

    def lineage_dot(self, run_id: str) -> str:
        """The lineage in Graphviz DOT: one box per candidate, green when correct, red when not."""
        colour = {"correct": "palegreen", None: "lightgrey"}
        graph = self.lineage(run_id)
        lines = [f'digraph "{run_id}" {{', "  rankdir=LR;", "  node [shape=box, style=filled];"]
        for n in graph["nodes"]:
            ms = f"\\n{n['ms']:.4g} ms" if n["ms"] is not None else ""
            label = f"#{n['id']} {n['operator']}\\n{n['verdict'] or n['status']}{ms}"
            lines.append(f'  c{n["id"]} [label="{label}", fillcolor={colour.get(n["verdict"], "salmon")}];')
        lines += [f"  c{e['from']} -> c{e['to']};" for e in graph["edges"]]
        return "\n".join(lines + ["}"]) + "\n"
