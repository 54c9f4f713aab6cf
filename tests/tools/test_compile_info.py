"""On a CPU the evaluator compiles each launched kernel for sm_90 to report its registers and spills
(tools/compile_info.py). Triton's launcher on a GPU compiles a kernel for the arguments it is given, a 16-byte
aligned tensor as such (vector loads); the CPU's compile takes the same facts from the recorded launch, so that
it reports on the kernel the GPU would run."""
import textwrap

import torch

from tools.compile_info import _divisibility, _signature, compiled
from tools.guard import Launch, _light

COPY = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit(do_not_specialize_on_alignment=["dst"])
    def copy(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)
''')


def _copy_kernel(tmp_path):
    import importlib.util

    (tmp_path / "copy_kernel.py").write_text(COPY)
    spec = importlib.util.spec_from_file_location("copy_kernel", tmp_path / "copy_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.copy


def _ptx(jit, spec: dict) -> str:
    return compiled(spec, jit).asm["ptx"]


def test_the_launch_records_which_arguments_are_16_divisible(tmp_path):
    jit = _copy_kernel(tmp_path)
    x = torch.zeros(1025)
    spec = _signature("copy", Launch("copy", jit, _light((x, x[1:], 1024)), {"BLOCK": 256}, None))
    assert spec["divisible"] == ["src", "n"]  # x[1:] starts 4 bytes in
    spec = _signature("copy", Launch("copy", jit, _light((x[1:], x, 1000)), {"BLOCK": 256}, None))
    assert spec["divisible"] == ["dst"]


def test_the_cpu_compile_vectorizes_where_the_gpu_would_and_only_there(tmp_path):
    jit = _copy_kernel(tmp_path)
    x = torch.zeros(4096)
    spec = _signature("copy", Launch("copy", jit, _light((x, x.clone(), 4096)), {"BLOCK": 1024, "num_warps": 4},
                                     None))
    assert sorted(_divisibility(jit, spec)) == [(0,), (2,)]  # dst asks not to be specialized on alignment
    ptx = _ptx(jit, spec)
    assert "ld.global.v4" in ptx, "an aligned source is read 16 bytes a lane"
    assert "st.global.v4" not in ptx, "the store's pointer is not taken as aligned"
    unaligned = _signature("copy", Launch("copy", jit, _light((x[1:], x.clone(), 4095)),
                                          {"BLOCK": 1024, "num_warps": 4}, None))
    assert "ld.global.v4" not in _ptx(jit, unaligned)
