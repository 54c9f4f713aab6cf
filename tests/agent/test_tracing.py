"""agent/analysis.py's trace on tasks the first capture cannot take, and how a candidate addresses model state:
each fixture is traced, rendered by a template and run against its reference in the Triton interpreter
(fixtures/tpl_runner.py, in its own process so TRITON_INTERPRET is set before triton is imported)."""
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from agent.analysis import TraceError, analyze, attribute_expr, load_task, trace
from agent.templates import BY_NAME, matching
from tools.rules import check_source

FIXTURES = Path(__file__).parent / "fixtures"


def capture(task: str, small: bool) -> str:
    module, _, _ = load_task(str(FIXTURES / f"{task}.py"), small)
    return trace(module, meta=not small).capture


def render_and_run(task: str, template: str, small: bool, runner) -> str:
    """The template's default candidate, accepted by the static rules, matching the reference."""
    a = analyze(str(FIXTURES / f"{task}.py"), small=small)
    assert template in [t.NAME for t in matching(a)]
    t = BY_NAME[template]
    source = t.render(a, t.default(a))
    compile(source, "candidate", "exec")  # check_source passes what does not parse; loading would not
    assert check_source(source, (FIXTURES / f"{task}.py").read_text()) is None
    out = runner.run(FIXTURES / f"{task}.py", source)
    assert out["error"] is None, out["error"]
    assert out["rel_errors"] and all(e <= 1e-4 for e in out["rel_errors"]), out
    return source


def test_sequential_and_module_list_parameters_are_indexed(runner):
    source = render_and_run("trace_sequential_mlp", "gemm", True, runner)
    assert "self.network[0].weight" in source and "self.network[2].bias" in source
    assert "self.heads[0].weight" in source and "self.network.0" not in source


@pytest.mark.parametrize("small", [True, False])
def test_tensors_made_in_init_are_read_from_the_model(small, runner):
    """A plain attribute and a buffer are placeholders; a tensor in a list is a constant mapped back to its
    attribute. The candidate, built under the same seed, reads the same random values."""
    module, _, _ = load_task(str(FIXTURES / "trace_attr_state.py"), small)
    traced = trace(module, meta=not small)
    assert ("attribute", "h0") in traced.roles and ("buffer", "scale") in traced.roles
    source = render_and_run("trace_attr_state", "elementwise", small, runner)
    assert "self.h0" in source and "self.scale" in source and "self.offsets[0]" in source


def test_a_scalar_made_in_the_forward_keeps_its_value_at_full_shapes(runner):
    assert capture("trace_forward_constant", small=False) == "make_fx"
    source = render_and_run("trace_forward_constant", "elementwise", False, runner)
    assert "0.25" in source


def test_a_model_that_reads_values_in_init_is_built_on_the_cpu(runner):
    assert capture("trace_init_item", small=False) == "make_fx of a model built on the CPU"
    render_and_run("trace_init_item", "elementwise", False, runner)


def test_an_untraceable_task_names_every_capture_in_one_sentence():
    with pytest.raises(TraceError) as e:
        capture("trace_untraceable", small=False)
    message = str(e.value)
    assert "\n" not in message and message.endswith(".") and message.count(". ") == 0
    for part in ("make_fx failed (NotImplementedError: this forward never runs)",
                 "make_fx with non-fake constants failed", "make_fx of a model built on the CPU skipped",
                 "make_fx with real tensors skipped (the model and inputs at the task's shapes take more than 1 GiB)",
                 "torch.export failed"):
        assert part in message, message


@pytest.mark.parametrize("task", ["trace_value_branch", "trace_value_size"])
def test_a_branch_on_a_tensor_s_value_is_said_in_one_sentence(task, capfd):
    """Every capture fails on a data-dependent read (a branch, a number, a size: a tensor where an int goes); the
    reason names that, not each capture's guard text, and the terminal shows no partial graph (torch.export
    printed one, and the shape solver logged a warning)."""
    with pytest.raises(TraceError) as e:
        capture(task, small=True)
    assert str(e.value) == ("The forward branches on the values in its tensors (a tensor used as a Python bool or "
                            "number, as in `if torch.any(x < 0)`), which a traced kernel cannot follow.")
    err = capfd.readouterr().err
    assert "def forward" not in err and "Unable to find user code" not in err, err


def test_attribute_paths_become_python_expressions():
    class Root(nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = nn.Sequential(OrderedDict([("2", nn.Linear(3, 5)), ("5", nn.Linear(5, 7))]))
            self.blocks = nn.ModuleDict({"a-b": nn.Linear(3, 3), "k": nn.Linear(3, 3)})
            self.scales = nn.ParameterList([nn.Parameter(torch.ones(3))])
            self.held = [torch.zeros(2)]

    root = Root()
    cases = {"seq.2.weight": "getattr(self.seq, '2').weight", "seq.5.bias": "getattr(self.seq, '5').bias",
             "blocks.a-b.weight": "self.blocks['a-b'].weight", "blocks.k.bias": "self.blocks['k'].bias",
             "scales.0": "self.scales[0]", "held.0": "self.held[0]"}
    for path, expected in cases.items():
        expr = attribute_expr(root, path)
        assert expr == expected
        held = root.held[0] if path == "held.0" else root.get_parameter(path)
        assert eval(expr, {"self": root}) is held
        assert check_source(f"class M:\n    def read(self):\n        return {expr}\n") is None
