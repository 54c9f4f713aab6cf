"""Guards of a template candidate (agent/templates/program.py): a rewrite that holds only because a dimension has
size 1 records the shapes it relies on (ir.Guard), and a call that breaks a guard, or any input shape the
candidate was not generated for, runs the task's own forward with exactly one warning, never a wrong answer and
never an error. The candidate runs in the Triton interpreter, in its own process."""
import json
import os
import subprocess
import sys
from pathlib import Path

from agent.analysis import analyze
from agent.templates import matching
from agent.templates.ir import Guard, lower
from tools.rules import check_source

ROOT = Path(__file__).resolve().parents[2]
ROW_SUM = ROOT / "tests" / "agent" / "fixtures" / "rewrite_gemm_row_sum.py"

# a max over the output features of a Linear with one output feature: a reduction over a dim of size 1
TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x).amax(dim=1, keepdim=True)) * 2


def get_inputs():
    return [torch.randn(13, 37)]


def get_init_inputs():
    return [37, 1]
"""

CALLS = """
import importlib.util, json, sys, warnings, torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
cand = load(sys.argv[1], "cand")
torch.manual_seed(0)
for init, shape in [((37, 1), (13, 37)), ((37, 3), (13, 37)), ((37, 1), (5, 37))]:
    model, new = cand.Model(*init), cand.ModelNew(*init)
    new.load_state_dict(model.state_dict())
    x = torch.randn(shape)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [new(x), new(x)]  # the second call of a broken guard says nothing more
    for out in outs:
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    print(json.dumps({"init": init, "shape": shape, "warnings": [str(w.message) for w in caught]}))
"""


def test_a_size_one_rewrite_records_the_shapes_it_relies_on_as_guards(tmp_path):
    task = tmp_path / "task.py"
    task.write_text(TASK)
    program = lower(analyze(str(task), small=True, arch="cpu"))
    assert "reduce_over_ones" in program.rewrites
    weight = next(g for g in program.guards if g.base == "self.linear.weight")
    assert isinstance(weight, Guard) and weight.shape == (1, 37) and "reduce_over_ones" in weight.why
    # a rule that holds at any shape (a row sum of a GEMM as a GEMV) adds no guard
    assert lower(analyze(str(ROW_SUM), small=True, arch="cpu")).guards == []


def test_a_broken_guard_runs_the_reference_with_one_warning(tmp_path):
    task = tmp_path / "task.py"
    task.write_text(TASK)
    analysis = analyze(str(task), small=True, arch="cpu")
    template = matching(analysis)[0]
    source = template.render(analysis, template.default(analysis))
    assert check_source(source, TASK) is None  # the fallback is inside the candidate language
    (tmp_path / "candidate.py").write_text(source)
    (tmp_path / "calls.py").write_text(CALLS)
    done = subprocess.run([sys.executable, str(tmp_path / "calls.py"), str(tmp_path / "candidate.py")],
                          capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"},
                          cwd=str(ROOT), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    at_traced, other_weight, other_input = [json.loads(line) for line in done.stdout.splitlines()]
    assert at_traced["warnings"] == []  # the kernels ran
    [said] = other_weight["warnings"]  # out_features 3: the reduced dim is no longer of size 1
    assert "self.linear.weight of shape (1, 37)" in said and "reduce_over_ones" in said and "reference" in said
    [said] = other_input["warnings"]  # a batch of 5: not the shape the candidate was generated for
    assert "x of shape (13, 37)" in said and "the shape it was generated for" in said


def test_warnings_warn_alone_is_in_the_candidate_language():
    task = "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    for call, rule in [("warnings.warn('guard broken', stacklevel=2)", None),
                       ("warnings.simplefilter('ignore')", "calls"), ("warnings.filters.clear()", "calls")]:
        source = task + f"\nimport warnings\n\n\nclass ModelNew(Model):\n    def forward(self, x):\n        {call}\n" \
                        f"        return x\n"
        reason = check_source(source, task)
        assert (reason is None) if rule is None else reason.startswith(f"Rejected ({rule})"), (call, reason)
