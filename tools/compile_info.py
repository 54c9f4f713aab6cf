"""Triton compile metadata of the kernels a candidate launched: registers, spills, shared memory,
num_warps, num_stages. On a GPU they are read from the compiled kernels; on a CPU each kernel is compiled
for sm_90 anyway (Triton builds a cubin without a GPU) and ptxas reports registers and spills."""
from __future__ import annotations

import inspect
import json
import os
import re
import sys
import subprocess
import tempfile
from pathlib import Path

import torch

from tools.guard import Launch, TensorArg
from tools.results import CompileInfo, KernelInfo

TRITON_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
                 torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
                 torch.bool: "i1"}


def compile_info(first: dict[str, Launch], on_gpu: bool, candidate_path: str = "candidate.py") -> CompileInfo:
    if on_gpu:
        return CompileInfo([_from_kernel(name, l.kernel) for name, l in first.items()],
                           "read from the compiled kernels")
    # The interpreter has patched triton.language in this process, so compile in a clean one.
    try:
        specs = [_signature(name, l) for name, l in first.items()]
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        run = subprocess.run([sys.executable, "-m", "tools.compile_info", candidate_path, json.dumps(specs)],
                             capture_output=True, text=True, env=env, timeout=300)
        if run.returncode != 0:
            raise RuntimeError((run.stderr.strip().splitlines() or ["no output"])[-1])
        return CompileInfo([KernelInfo(**k) for k in json.loads(run.stdout)],
                           "compiled for sm_90 on a CPU; registers and spills from ptxas")
    except Exception as e:  # any Triton or ptxas failure: say so, the verdict does not depend on it
        return CompileInfo([KernelInfo(name) for name in first],
                           f"not available on this CPU: compiling for sm_90 failed ({_one_line(e)})")


def _signature(name: str, launch: Launch) -> dict:
    fn = getattr(launch.jit_fn, "fn", launch.jit_fn)
    arg_names = list(inspect.signature(fn).parameters)
    constexpr_names = {n for n, p in inspect.signature(fn).parameters.items()
                       if "constexpr" in str(p.annotation)}
    bound = dict(zip(arg_names, launch.args))
    bound.update({k: v for k, v in launch.kwargs.items() if k in arg_names})
    signature, constexprs = {}, {}
    for arg, value in bound.items():
        if arg in constexpr_names or value is None:
            signature[arg], constexprs[arg] = "constexpr", value
        else:
            signature[arg] = _triton_type(value)
    json.dumps(constexprs)  # a constexpr that is not plain data (a tl.dtype, say) cannot cross: say so
    options = {k: v for k, v in launch.kwargs.items() if k in ("num_warps", "num_stages")}
    return {"name": name, "function": fn.__name__, "signature": signature, "constexprs": constexprs,
            "options": options}


def _compile_sm90(spec: dict, module) -> KernelInfo:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    jit = getattr(module, spec["function"])
    jit = getattr(jit, "fn", jit) if not hasattr(jit, "arg_names") else jit  # an autotuned kernel wraps one
    kernel = triton.compile(ASTSource(jit, spec["signature"], spec["constexprs"]),
                            target=GPUTarget("cuda", 90, 32), options=spec["options"])
    registers, spills = _ptxas_usage(kernel.asm["ptx"])
    return KernelInfo(spec["name"], registers, spills, kernel.metadata.shared, kernel.metadata.num_warps,
                      kernel.metadata.num_stages)


def _from_kernel(name: str, kernel) -> KernelInfo:
    if kernel is None:
        return KernelInfo(name)
    meta = kernel.metadata
    return KernelInfo(name, getattr(kernel, "n_regs", None), getattr(kernel, "n_spills", None),
                      getattr(meta, "shared", None), getattr(meta, "num_warps", None),
                      getattr(meta, "num_stages", None))


def _triton_type(value) -> str:
    if isinstance(value, TensorArg):
        return "*" + TRITON_DTYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"argument of type {type(value).__name__}")


def _ptxas_usage(ptx: str) -> tuple[int, int]:
    import triton
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        Path(src).write_text(ptx)
        errors = []
        for ptxas in sorted(bin_dir.glob("ptxas*"), reverse=True):  # ptxas-blackwell reads newer PTX
            r = subprocess.run([str(ptxas), "-v", "--gpu-name=sm_90a", src, "-o", os.devnull],
                               capture_output=True, text=True, timeout=120)
            if r.returncode == 0:
                regs = re.search(r"Used (\d+) registers", r.stderr)
                spills = re.search(r"(\d+) bytes spill stores", r.stderr)
                return int(regs.group(1)), int(spills.group(1)) if spills else 0
            errors.append(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    raise RuntimeError("; ".join(errors) or "no ptxas found in Triton's package")


def _one_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}"[:200]


if __name__ == "__main__":  # python -m tools.compile_info CANDIDATE.py SPECS_JSON (no TRITON_INTERPRET)
    from tools.task import import_file
    candidate = import_file(sys.argv[1], "kw_candidate")
    print(json.dumps([_compile_sm90(spec, candidate).__dict__ for spec in json.loads(sys.argv[2])]))
