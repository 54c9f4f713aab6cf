"""Compare hand-written Triton candidates (tasks/candidates/) with their tasks, at SMALL_SHAPES.

Run in its own process with TRITON_INTERPRET=1 set (triton must see it before any kernel is
defined), as tests/tasks/test_tasks.py does:

    TRITON_INTERPRET=1 python tests/tasks/check_candidates.py '[{"candidate": "04_softmax.py", "patch": {}}]'

Prints one JSON list: per case and seed, the relative error norm ||out - ref|| / ||ref||, whether the
parameters matched, or the error raised.
"""
from __future__ import annotations

import json
import sys
import traceback

from taskfiles import load_candidate, load_task

SEEDS = (0, 1)


def check_case(candidate: str, patch: dict) -> list[dict]:
    import torch

    task = load_task(candidate, small=True)
    cand = load_candidate(candidate, patch)
    rows = []
    for seed in SEEDS:
        row = {"candidate": candidate, "patch": patch, "seed": seed}
        try:
            torch.manual_seed(seed)
            ref_model = task.Model(*task.get_init_inputs())
            torch.manual_seed(seed)
            new_model = cand.ModelNew(*task.get_init_inputs())
            ref_state, new_state = ref_model.state_dict(), new_model.state_dict()
            row["same_params"] = ref_state.keys() == new_state.keys() and all(
                torch.equal(ref_state[k], new_state[k]) for k in ref_state)
            torch.manual_seed(1000 + seed)
            inputs = task.get_inputs()
            with torch.no_grad():
                ref = ref_model(*inputs)
                out = new_model(*inputs)
            row["same_shape"] = tuple(out.shape) == tuple(ref.shape) and out.dtype == ref.dtype
            diff = (out.double() - ref.double()).norm().item() if row["same_shape"] else float("inf")
            row["rel_err"] = diff / max(ref.double().norm().item(), 1e-30)
        except Exception:  # reported to the test, which fails with the traceback
            row["error"] = traceback.format_exc(limit=4)
        rows.append(row)
    return rows


def main(argv: list[str]) -> int:
    cases = json.loads(argv[1])
    rows = [row for case in cases for row in check_case(case["candidate"], case.get("patch", {}))]
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
