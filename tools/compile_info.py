"""Triton compile metadata of the kernels a candidate launched: registers, spills, shared memory,
num_warps, num_stages. On a GPU they are read from the compiled kernels, in the worker (no compile). On a CPU
each kernel is compiled for sm_90 anyway (Triton builds a cubin without a GPU) and ptxas reports registers and
spills; that compile can take minutes, so it never runs in the candidate's time: the worker only writes what
its kernels were launched with (`write_specs`), and the parent compiles once the verdict is in (`compile_after`),
in a process of its own (forked by a warm server, tools/compile_server.py) with its own time limit.

    info = from_kernels(recorder.first)                       # a GPU worker
    info = write_specs(recorder.first, "compile_specs.json")  # a CPU worker: placeholder, figures to come
    info = compile_after(work_dir, env, server, cache)        # the parent, after the worker has answered

A compile's answer depends on nothing but what it reads: the candidate's source, the launch specs, Triton (its
version and the environment it reads) and this file. The parent keeps each answer under a key made of those in
`cache` (a folder), and a candidate compiled before with the same specs is answered from there, with no process."""
from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
import re
import sys
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tools.guard import DescriptorArg, Launch, TensorArg
from tools.results import CompileInfo, KernelInfo

if TYPE_CHECKING:
    from tools.compile_server import CompileServer

TRITON_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
                 torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
                 torch.bool: "i1"}
SPECS_FILE = "compile_specs.json"  # in the job's work folder, beside candidate.py
COMPILE_TIMEOUT_S = 300.0
PENDING = "pending: compiled for sm_90 after the verdict, outside the candidate's time"
COMPILED = "compiled for sm_90 on a CPU; registers and spills from ptxas"
COMPILER_ENV = ("TRITON_", "MLIR_", "LLVM_", "NVPTX_", "PTXAS_", "DISABLE_")  # what Triton's compile may read


def from_kernels(first: dict[str, Launch]) -> CompileInfo:
    return CompileInfo([_from_kernel(name, l.kernel) for name, l in first.items()], "read from the compiled kernels")


def write_specs(first: dict[str, Launch], path: str = SPECS_FILE) -> CompileInfo:
    """Writes each kernel's launch signature for `compile_after`; the placeholder the result carries until then."""
    names = [KernelInfo(name) for name in first]
    try:
        specs = [_signature(name, l) for name, l in first.items()]
    except Exception as e:  # a constexpr that is not plain data (a tl.dtype, say) cannot cross: say so
        return CompileInfo(names, f"not available on this CPU: {_one_line(e)}")
    Path(path).write_text(json.dumps(specs))
    return CompileInfo(names, PENDING)


def compile_after(work: str, env: dict[str, str], server: CompileServer, cache: Path | None = None,
                  timeout_s: float = COMPILE_TIMEOUT_S) -> CompileInfo | None:
    """Compiles the kernels whose specs the worker wrote in `work` (None when it wrote none), in a process of
    its own (the interpreter's patches of triton.language are not in it), forked by `server` in `work` with
    `env`; or answers from `cache` when the same compile answered there before (only successes are kept)."""
    specs_path = os.path.join(work, SPECS_FILE)
    if not os.path.exists(specs_path):
        return None
    specs_text = Path(specs_path).read_text()
    specs = json.loads(specs_text)
    env = {k: v for k, v in env.items() if k != "TRITON_INTERPRET"}
    kept = None
    if cache is not None:
        kept = cache / f"{_compile_key(Path(work, 'candidate.py').read_bytes(), specs_text, env)}.json"
    if kept is not None and kept.exists():
        return CompileInfo([KernelInfo(**k) for k in json.loads(kept.read_text())], COMPILED)
    try:
        out = server.run(work, env, timeout_s)
        info = CompileInfo([KernelInfo(**k) for k in json.loads(out)], COMPILED)
        if kept is not None:
            _keep(kept, out)
        return info
    except Exception as e:  # any Triton or ptxas failure, or the time limit: say so, the verdict stands
        return CompileInfo([KernelInfo(s["name"]) for s in specs],
                           f"not available on this CPU: compiling for sm_90 failed ({_one_line(e)})")


def _compile_key(candidate: bytes, specs: str, env: dict[str, str]) -> str:
    """Everything a compile reads: the candidate, its launch specs, this file, the Python and Triton that run it,
    and the environment variables Triton and its LLVM read (save the job's own cache folder)."""
    knobs = sorted((k, v) for k, v in env.items() if k.startswith(COMPILER_ENV) and k != "TRITON_CACHE_DIR")
    parts = [candidate, specs.encode(), Path(__file__).read_bytes(), sys.executable.encode(),
             importlib.metadata.version("triton").encode(), json.dumps(knobs).encode()]
    return hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).hexdigest()


def _keep(path: Path, answer: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_text(answer)
    os.replace(temporary, path)  # atomic: a reader sees a whole answer or none


def _signature(name: str, launch: Launch) -> dict:
    fn = getattr(launch.jit_fn, "fn", launch.jit_fn)
    arg_names = list(inspect.signature(fn).parameters)
    constexpr_names = {n for n, p in inspect.signature(fn).parameters.items()
                       if "constexpr" in str(p.annotation)}
    bound = dict(zip(arg_names, launch.args))
    bound.update({k: v for k, v in launch.kwargs.items() if k in arg_names})
    signature, constexprs, divisible = {}, {}, []
    for arg, value in bound.items():
        if arg in constexpr_names or value is None:
            signature[arg], constexprs[arg] = "constexpr", value
        else:
            signature[arg] = _triton_type(value)
            if _divisible(value):
                divisible.append(arg)
    json.dumps(constexprs)
    options = {k: v for k, v in launch.kwargs.items() if k in ("num_warps", "num_stages", "maxnreg")}
    return {"name": name, "function": fn.__name__, "signature": signature, "constexprs": constexprs,
            "options": options, "divisible": divisible}


def _divisible(value) -> bool:
    """Whether Triton's launcher takes an argument as divisible by 16: a 16-byte aligned tensor, or such an int."""
    if isinstance(value, TensorArg):
        return value.aligned
    return type(value) is int and value % 16 == 0


def _divisibility(jit, spec: dict) -> dict:
    """ASTSource's attributes for the arguments the launch found 16-divisible (a tensor's address, an int), as
    Triton's launcher specializes a kernel on a GPU, save those the kernel asks it not to
    (do_not_specialize_on_alignment for a pointer, do_not_specialize for an int): on a CPU the compile would
    otherwise assume unaligned pointers, and load one element a lane where the GPU's kernel loads vectors."""
    attrs = {}
    for i, param in enumerate(jit.params):
        if param.name not in spec["divisible"]:
            continue
        pointer = spec["signature"][param.name].startswith("*")
        if not (param.do_not_specialize_on_alignment if pointer else param.do_not_specialize):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return attrs


def answer() -> str:
    """The compile of candidate.py's kernels as the specs beside it describe them (in a compile server's child, in
    the job's folder, without TRITON_INTERPRET), as JSON."""
    from tools.task import import_file
    candidate = import_file("candidate.py", "kw_candidate")
    return json.dumps([_compile_sm90(spec, candidate).__dict__ for spec in json.loads(Path(SPECS_FILE).read_text())])


def _compile_sm90(spec: dict, module) -> KernelInfo:
    jit = getattr(module, spec["function"])
    jit = getattr(jit, "fn", jit) if not hasattr(jit, "arg_names") else jit  # an autotuned kernel wraps one
    kernel = compiled(spec, jit)
    registers, spills = ptxas_usage(kernel.asm["ptx"])
    return KernelInfo(spec["name"], registers, spills, kernel.metadata.shared, kernel.metadata.num_warps,
                      kernel.metadata.num_stages)


def compiled(spec: dict, jit):
    """The kernel `jit` compiled for sm_90 as the launch `spec` (_signature) describes it."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    return triton.compile(ASTSource(jit, spec["signature"], spec["constexprs"], _divisibility(jit, spec)),
                          target=GPUTarget("cuda", 90, 32), options=spec["options"])


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
    if isinstance(value, DescriptorArg):
        return f"tensordesc<{TRITON_DTYPES[value.dtype]}{list(value.block_shape)}>"
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"argument of type {type(value).__name__}")


def ptxas_usage(ptx: str, cubin: Path | None = None) -> tuple[int, int]:
    """Registers a thread and bytes spilled, as ptxas builds `ptx` for sm_90a (into `cubin` where given: its SASS
    for nvdisasm, benchmarks/sass_bench.py)."""
    import triton
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        Path(src).write_text(ptx)
        errors = []
        for ptxas in sorted(bin_dir.glob("ptxas*"), reverse=True):  # ptxas-blackwell reads newer PTX
            r = subprocess.run([str(ptxas), "-v", "--gpu-name=sm_90a", src, "-o", str(cubin or os.devnull)],
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
