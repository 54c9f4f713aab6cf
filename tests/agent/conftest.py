"""What the agent tests share: `runner`, one long-lived Triton-interpreter process (fixtures/tpl_runner.py,
which sets TRITON_INTERPRET=1 before importing triton) that runs candidates against their tasks, one for the
session's tests (its start, PyTorch, Triton and the analysis imported, was some 5 s of a CPU for each module);
`sm90`, which compiles a candidate's kernel for an H200 here, with no GPU, as Triton's own compile would
(what the interpreter lets pass, a scalar pointer under a block mask say, fails there as it would on the GPU);
and `on_gpu`, a candidate and its reference on a GPU with the same weights, for the GPU-marked tests."""
import importlib.util
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
_spec = importlib.util.spec_from_file_location("tpl_client", FIXTURES / "tpl_client.py")
tpl_client = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tpl_client)


@pytest.fixture(scope="session")
def runner(tmp_path_factory):
    r = tpl_client.Runner(tmp_path_factory.mktemp("candidates"))
    yield r
    r.close()


def compile_sm90(path: Path, name: str, consts: dict, aligned: bool = True, num_warps: int = 4,
                 num_stages: int = 3, ints: tuple = ()):
    """Kernel `name` of the candidate at `path`, compiled for sm_90 with `consts` as its meta-parameters, `ints`
    32-bit integers and every other argument an fp32 pointer, 16-byte aligned (as Triton's launcher specializes
    them) or not, at Triton's default of 3 stages unless given."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    jit = getattr(module, name)
    sig = {a: "constexpr" if a in consts else "i32" if a in ints else "*fp32" for a in jit.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(jit.arg_names)
             if a not in consts and a not in ints and aligned}
    return triton.compile(ASTSource(jit, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


@pytest.fixture
def sm90():
    return compile_sm90


def candidate_on_gpu(source: str, folder: Path, name: str) -> tuple:
    """(model, new, inputs): the candidate `source`'s Model and ModelNew on the GPU, ModelNew holding Model's
    weights, and the task's inputs there (drawn after seeding 0). The source is written to `folder` as `name`.py:
    Triton reads a kernel's source from its file."""
    import torch

    module = folder / f"{name}.py"
    module.write_text(source)
    spec = importlib.util.spec_from_file_location(name, module)
    cand = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cand)
    torch.manual_seed(0)
    inputs = [x.cuda() if torch.is_tensor(x) else x for x in cand.get_inputs()]
    model = cand.Model(*cand.get_init_inputs()).cuda()
    new = cand.ModelNew(*cand.get_init_inputs()).cuda()
    new.load_state_dict(model.state_dict())
    return model, new, inputs


@pytest.fixture
def on_gpu():
    return candidate_on_gpu
