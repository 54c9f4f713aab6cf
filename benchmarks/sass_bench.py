"""The GEMM kernel of a template's candidates as an H200 would run it, with no GPU: each candidate's
`_gemm_kernel` compiled for sm_90 by the installed Triton (its bundled ptxas and nvdisasm), every argument but
its meta-parameters an fp32 pointer, 16-byte aligned as Triton's launcher specializes them, or a TMA descriptor
where the candidate makes one for it. Per candidate it prints the registers a thread, the bytes spilled, and the
SASS instructions of the kernel's longest loop (its K loop; the whole kernel's, and the row says so, where the
compiler unrolled every loop): in all, integer ones and tensor-core products. These are counts, not times: they
say where a kernel's instructions go, and a GPU says what they cost. Counts depend on the Triton version (the
table names it): the H200 that times our kernels runs Triton 3.6, and a CPU's newer Triton can compile the same
kernel to other code.

    python benchmarks/sass_bench.py TASK.py [TASK.py ...] --template gemm [--variants 0,1] [--set NAME[@I]=KEY:VALUE,...]

--variants and --set pick candidates as in variants_bench.py. A candidate the template refuses, or whose kernel
does not compile, shows why in its row. Exit codes: 0; 2 for bad arguments (a missing task file, an unknown
template, one that does not match a task, a malformed --set).
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import triton  # noqa: E402

from agent.analysis import analyze  # noqa: E402
from tools.compile_info import compiled, ptxas_usage  # noqa: E402
from variants_bench import add_picks, candidates, first_line, picked  # noqa: E402

INTEGER = ("IMAD", "IADD", "ISETP", "LOP", "SHF", "LEA", "SEL", "VIADD", "VIMNMX", "IMNMX", "PLOP", "IABS", "SGXT",
           "PRMT", "UIMAD", "UIADD", "UISETP", "ULOP", "USHF", "ULEA", "USEL")
PRODUCTS = ("HMMA", "HGMMA")
LAUNCH = re.compile(r"(_gemm_kernel\d+)\[.*?\]\((.*?)\)$", re.M)
DESCRIPTOR = re.compile(r"^\s*(\w+) = TensorDescriptor\(\w+, \[.*?\], \[.*?\], \[([\d, ]+)\]\)$", re.M)


def launch_of(source: str) -> tuple[str, dict, dict, list[str]]:
    """The candidate's first GEMM kernel launch: its name, meta-parameters, compile options and the Triton type of
    each other argument (a TMA descriptor where the candidate makes one, else an fp32 pointer)."""
    m = LAUNCH.search(source)
    if not m:
        raise ValueError("the candidate launches no _gemm_kernel")
    blocks = {name: block for name, block in DESCRIPTOR.findall(source)}
    args = m.group(2).split(", ")
    keywords = dict(kv.split("=") for kv in args if "=" in kv)
    options = {k: int(keywords.pop(k)) for k in ("num_warps", "num_stages", "maxnreg") if k in keywords}
    types = [f"tensordesc<fp32[{blocks[a]}]>" if a in blocks else "*fp32" for a in args if "=" not in a]
    return m.group(1), {k: _value(k, v) for k, v in keywords.items()}, options, types


def _value(name: str, text: str) -> int | bool:
    """A meta-parameter's value as the launch on a GPU gives it: an int, or a tensor's .is_cuda (True there)."""
    if text.endswith(".is_cuda"):
        return True
    if text.lstrip("-").isdigit():
        return int(text)
    raise ValueError(f"the launch gives meta-parameter {name} as {text}, which this bench cannot evaluate")


def sass(path: Path, name: str, meta: dict, options: dict, types: list[str]) -> tuple[int, int, str]:
    """Registers, spilled bytes and the SASS text of kernel `name` in the candidate at `path`, built for sm_90
    with `types` its other arguments' (its pointers 16-byte aligned) as tools/compile_info builds a launch."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    jit = getattr(module, name)
    others = iter(types)
    signature = {a: "constexpr" if a in meta else next(others) for a in jit.arg_names}
    aligned = [a for a in jit.arg_names if signature[a] == "*fp32"]
    kernel = compiled({"signature": signature, "constexprs": meta, "options": options, "divisible": aligned}, jit)
    cubin = path.with_suffix(".cubin")
    registers, spilled = ptxas_usage(kernel.asm["ptx"], cubin)
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    text = subprocess.run([str(nvdisasm), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    return registers, spilled, text


def longest_loop(text: str) -> tuple[Counter, bool]:
    """The opcodes of the longest loop in SASS `text` (from a label to a branch back to it), and whether there is
    one: where the compiler unrolled every loop, the whole kernel's."""
    code, at = [], {}
    for line in text.splitlines():
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            at[label.group(1)] = len(code)
            continue
        ins = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)(.*?);", line)
        if ins:
            code.append((ins.group(1).split(".")[0], ins.group(2)))
    loops = [code[at[t.group(0)]:i + 1] for i, (op, rest) in enumerate(code)
             if op == "BRA" and (t := re.search(r"\.L_x_\d+", rest)) and at.get(t.group(0), i) < i]
    return Counter(op for op, _ in max(loops, key=len, default=code)), bool(loops)


def rows_for(task: Path, template, picks: list[int], sets: list, folder: Path) -> list[str]:
    a = analyze(str(task), small=False, name=task.stem)
    if not template.match(a):
        raise ValueError(f"the {template.NAME} template does not match {task}")
    rows = []
    for n, (label, params) in enumerate(candidates(template.variants(a), picks, sets)):
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        try:
            path = folder / f"{task.stem}_{n}.py"
            path.write_text(template.render(a, params))
            registers, spilled, text = sass(path, *launch_of(path.read_text()))
        except Exception as e:  # a refused render, or a kernel that does not compile
            rows.append(f"| {task.stem} | {label} | – | – | – | {type(e).__name__}: {first_line(e)} ({shown}) |")
            continue
        ops, loop = longest_loop(text)
        integer = sum(c for op, c in ops.items() if op.startswith(INTEGER))
        products = sum(c for op, c in ops.items() if op in PRODUCTS)
        counts = f"{sum(ops.values())} ({integer}, {products})" + ("" if loop else ", no loop: the whole kernel")
        rows.append(f"| {task.stem} | {label} | {registers} | {spilled} | {counts} | {shown} |")
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_picks(p, "0,1")
    args = p.parse_args()
    template, picks, sets = picked(p, args)
    lines = [f"Compiled for sm_90 by Triton {triton.__version__} on this machine, no GPU: counts, not times.", "",
             "| task | candidate | registers | spilled bytes | K-loop SASS (integer, tensor-core products) | "
             "parameters, or why no figures |", "|---|---|---:|---:|---:|---|"]
    with tempfile.TemporaryDirectory() as folder:
        for task in args.tasks:
            try:
                lines += rows_for(Path(task), template, picks, sets, Path(folder))
            except ValueError as e:
                p.error(str(e))
            print(f"{Path(task).stem}: done", file=sys.stderr, flush=True)
    print("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
