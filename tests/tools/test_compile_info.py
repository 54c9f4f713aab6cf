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


def test_a_compile_is_answered_again_from_the_cache_only_for_the_same_inputs(tmp_path):
    """The parent's compile of a candidate (tools/evaluate.py) is kept under a key of what it read; the same
    candidate and specs are answered from the cache with no process (a time limit no process could meet), a
    changed kernel, launch or Triton setting is compiled again, and a compile that failed is never kept."""
    import json
    import os

    from tools.compile_info import COMPILED, SPECS_FILE, compile_after
    from tools.compile_server import CompileServer

    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    (work / "candidate.py").write_text(COPY)
    spec = {"name": "copy", "function": "copy", "signature": {"src": "*fp32", "dst": "*fp32", "n": "i32",
                                                               "BLOCK": "constexpr"},
            "constexprs": {"BLOCK": 1024}, "options": {"num_warps": 4}, "divisible": ["src", "n"]}
    (work / SPECS_FILE).write_text(json.dumps([spec]))
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    server = CompileServer()
    first = compile_after(str(work), env, server, cache)
    assert first.source == COMPILED and first.kernels[0].registers > 0, first.source
    assert len(list(cache.iterdir())) == 1
    again = compile_after(str(work), {**env, "TRITON_CACHE_DIR": str(tmp_path / "other")}, server, cache,
                          timeout_s=1e-3)
    assert again == first  # the job's own Triton folder is not part of what the compile reads

    def missed(**change) -> bool:
        info = compile_after(str(work), {**env, **change.get("env", {})}, server, cache, timeout_s=1e-3)
        return info.source.startswith("not available") and "no answer within" in info.source

    (work / SPECS_FILE).write_text(json.dumps([{**spec, "constexprs": {"BLOCK": 512}}]))
    assert missed()
    (work / SPECS_FILE).write_text(json.dumps([spec]))
    (work / "candidate.py").write_text(COPY.replace("mask=offs < n), mask", "mask=offs < n) + 1, mask"))
    assert missed()
    (work / "candidate.py").write_text(COPY)
    assert missed(env={"TRITON_DEFAULT_FP_FUSION": "0"})
    server.close()
    assert len(list(cache.iterdir())) == 1  # the failures (here, the time limit) left nothing


SCALE = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def scale(src, dst, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs) * 2.0)
''')


def test_a_launch_capping_its_registers_is_compiled_under_that_cap(tmp_path):
    """A template launch may cap a thread's registers (maxnreg, for more programs an SM): the CPU's compile for
    sm_90 takes the cap from the recorded launch, so it reports the registers and spills the GPU would get."""
    import importlib.util

    from tools.compile_info import ptxas_usage

    (tmp_path / "scale_kernel.py").write_text(SCALE)
    spec = importlib.util.spec_from_file_location("scale_kernel", tmp_path / "scale_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.zeros(4096)
    usage = {}
    for cap in (None, 64):  # 4096 elements in one warp: 128 a thread, held at once
        kwargs = {"BLOCK": 4096, "num_warps": 1, **({"maxnreg": cap} if cap else {})}
        spec = _signature("scale", Launch("scale", module.scale, _light((x, x.clone())), kwargs, None))
        usage[cap] = ptxas_usage(_ptx(module.scale, spec))
    assert usage[None][0] > 128 and usage[None][1] == 0
    assert usage[64][0] <= 64 and usage[64][1] > 0, usage  # held under the cap, the rest spilled
