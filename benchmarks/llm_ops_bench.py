"""LLM-shaped ops in bf16, two tokens x hidden shapes each: RMSNorm, LayerNorm, softmax, cross-entropy over a
32k and a 128k vocabulary, SwiGLU, GeGLU, rotary embedding, and the other forward ops Liger-Kernel has a kernel
for (a residual add with RMSNorm, DyT, PolyNorm, the KL, Jensen-Shannon and total variation distances between
next-token distributions, and the LM head with its cross-entropy). Kernelwright's kernel beside eager PyTorch,
torch.compile and, when `liger_kernel` imports (pip install -e '.[bench]'), Liger-Kernel, all timed in this
one process, each with its relative error against an fp32 run of the same task on the same (bf16) values.

The tasks are written by this script into OUT/tasks and built as a user builds them:
`kernelwright batch OUT/tasks --dtype bfloat16 --budget N` (the optimize search of every task, no LLM, no
knowledge store), into OUT/runs; a second call, of the same ops or others, resumes that build (the folder of
tasks stays where it was, which the batch requires). Then each task's OUT/runs/TASK/best.py is
timed here with tools/profile.time_call (GPU time, L2 flushed before each call), the host's time per call
beside it (tools/profile.host_us), and the floor is the task's bytes over the device's measured copy bandwidth
(the LM head's, its products at the measured bf16 matmul rate, whichever takes longer).
Beside the floor, a device copy that moves as many bytes (half read, half written) is timed the same way: what
moving those bytes takes at this size. At a few tens of MB it is well above the floor (a 4096x4096 bf16 copy ran
at 1.32x it on an H200), so kw/copy says how far a kernel is from the best a memory-bound one can do there. An
op that only reads (cross-entropy) does no better than the copy after the flush every figure uses, which leaves
the L2's lines dirty: on an H200 (session 54) a pass summing 4096x32000 bf16 logits (262 MB) took 0.0700 ms, the
copy 0.0667 (the floor about 0.062; after a flush that only reads, 0.0617 and 0.0631).
Prints one table and writes OUT/llm_ops.md and OUT/llm_ops.json. The build gives a task 24 s by default (one
task per GPU here); the first seven ops' 14 tasks took about 10 minutes on one H100/H200, build and timing, so
give a call under a time limit fewer --ops. GPU only: on a machine without CUDA it says so and exits 2.

    python benchmarks/llm_ops_bench.py --out benchmarks/results/llm_ops [--ops rmsnorm,cross_entropy]
        [--budget 3] [--build-seconds S]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from tools.score import geomean  # noqa: E402

HEAD = '''import torch
import torch.nn as nn
import torch.nn.functional as F

'''
# Each op: a task source (its sizes are globals that the shapes below set) and two (tokens, hidden) shapes.
TASKS = {
    "rmsnorm": ('''class Model(nn.Module):
    """RMSNorm (Llama): x / sqrt(mean(x^2) + eps) * weight over the hidden size."""
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def get_inputs():
    return [torch.randn(tokens, hidden)]


def get_init_inputs():
    return [hidden]
''', [(4096, 4096), (16384, 8192)]),
    "layernorm": ('''class Model(nn.Module):
    """LayerNorm over the hidden size, with weight and bias."""
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(hidden))
            self.norm.bias.add_(0.1 * torch.randn(hidden))

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(tokens, hidden)]


def get_init_inputs():
    return [hidden]
''', [(4096, 4096), (16384, 8192)]),
    "softmax": ('''class Model(nn.Module):
    """Softmax over rows of attention scores."""
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [4.0 * torch.randn(tokens, hidden)]


def get_init_inputs():
    return []
''', [(8192, 4096), (2048, 32768)]),
    "cross_entropy": ('''class Model(nn.Module):
    """Mean cross-entropy of next-token logits over the vocabulary (hidden = vocabulary size)."""
    def forward(self, logits, labels):
        return F.cross_entropy(logits, labels)


def get_inputs():
    return [2.0 * torch.randn(tokens, hidden), torch.randint(0, hidden, (tokens,))]


def get_init_inputs():
    return []
''', [(4096, 32000), (2048, 128256)]),
    "swiglu": ('''class Model(nn.Module):
    """SwiGLU's gating: silu(gate) * up (hidden = intermediate size)."""
    def forward(self, gate, up):
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(tokens, hidden), torch.randn(tokens, hidden)]


def get_init_inputs():
    return []
''', [(4096, 11008), (8192, 14336)]),
    "geglu": ('''class Model(nn.Module):
    """GeGLU's gating: gelu(gate, tanh approximation) * up (hidden = intermediate size)."""
    def forward(self, gate, up):
        return F.gelu(gate, approximate="tanh") * up


def get_inputs():
    return [torch.randn(tokens, hidden), torch.randn(tokens, hidden)]


def get_init_inputs():
    return []
''', [(4096, 11008), (8192, 14336)]),
    "rope": ('''HEAD_DIM = 128


def rotate_half(x):
    return torch.cat((-x[..., HEAD_DIM // 2:], x[..., :HEAD_DIM // 2]), dim=-1)


class Model(nn.Module):
    """Rotary embedding of queries (hidden / 128 heads) and keys (a quarter as many heads), one sequence of
    `tokens` positions; cos and sin are (tokens, 128)."""
    def forward(self, q, k, cos, sin):
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def get_inputs():
    heads = hidden // HEAD_DIM
    angle = torch.arange(tokens)[:, None] * 10000.0 ** (-torch.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angle = torch.cat((angle, angle), dim=-1)
    return [torch.randn(1, heads, tokens, HEAD_DIM), torch.randn(1, heads // 4, tokens, HEAD_DIM),
            angle.cos(), angle.sin()]


def get_init_inputs():
    return []
''', [(2048, 4096), (8192, 4096)]),
    "add_rmsnorm": ('''class Model(nn.Module):
    """A decoder layer's residual add and RMSNorm: h = x + residual, then h / sqrt(mean(h^2) + eps) * weight;
    returns the normed h and h (the next residual)."""
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x, residual):
        h = x + residual
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight, h


def get_inputs():
    return [torch.randn(tokens, hidden), torch.randn(tokens, hidden)]


def get_init_inputs():
    return [hidden]
''', [(4096, 4096), (16384, 8192)]),
    "dyt": ('''class Model(nn.Module):
    """DyT, the norm-free transformer's stand-in for LayerNorm: gamma * tanh(alpha * x) + beta."""
    def __init__(self, hidden):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), 0.5))
        self.gamma = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.beta = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x):
        return self.gamma * torch.tanh(self.alpha * x) + self.beta


def get_inputs():
    return [torch.randn(tokens, hidden)]


def get_init_inputs():
    return [hidden]
''', [(4096, 4096), (16384, 8192)]),
    "poly_norm": ('''class Model(nn.Module):
    """PolyNorm: w0 * n(x^3) + w1 * n(x^2) + w2 * n(x) + b, where n(u) = u / sqrt(mean(u^2) + eps) over the hidden
    size."""
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([0.3, 0.4, 0.5]))
        self.bias = nn.Parameter(torch.tensor(0.1))

    def forward(self, x):
        def n(u):
            return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight[0] * n(x ** 3) + self.weight[1] * n(x ** 2) + self.weight[2] * n(x) + self.bias


def get_inputs():
    return [torch.randn(tokens, hidden)]


def get_init_inputs():
    return []
''', [(4096, 4096), (16384, 8192)]),
    "kl_div": ('''class Model(nn.Module):
    """Distillation's KL divergence: a teacher's next-token probabilities against a student's log-probabilities
    over the vocabulary (hidden = vocabulary size), summed over it and averaged over tokens."""
    def forward(self, log_q, p):
        return F.kl_div(log_q, p, reduction="batchmean")


def get_inputs():
    return [torch.log_softmax(2.0 * torch.randn(tokens, hidden), -1),
            torch.softmax(2.0 * torch.randn(tokens, hidden), -1)]


def get_init_inputs():
    return []
''', [(4096, 32000), (2048, 128256)]),
    "jsd": ('''class Model(nn.Module):
    """Jensen-Shannon divergence between a student's and a teacher's next-token distributions, both given as
    log-probabilities over the vocabulary (hidden = vocabulary size), averaged over tokens."""
    def forward(self, log_q, log_p):
        q, p = log_q.exp(), log_p.exp()
        log_m = (0.5 * (p + q)).log()
        return (0.5 * p * (log_p - log_m) + 0.5 * q * (log_q - log_m)).sum(-1).mean()


def get_inputs():
    return [torch.log_softmax(2.0 * torch.randn(tokens, hidden), -1),
            torch.log_softmax(2.0 * torch.randn(tokens, hidden), -1)]


def get_init_inputs():
    return []
''', [(4096, 32000), (2048, 128256)]),
    "tvd": ('''class Model(nn.Module):
    """Total variation distance between two next-token distributions over the vocabulary (hidden = vocabulary
    size), averaged over tokens."""
    def forward(self, p, q):
        return 0.5 * (p - q).abs().sum(-1).mean()


def get_inputs():
    return [torch.softmax(2.0 * torch.randn(tokens, hidden), -1), torch.softmax(2.0 * torch.randn(tokens, hidden), -1)]


def get_init_inputs():
    return []
''', [(4096, 32000), (2048, 128256)]),
    "linear_cross_entropy": ('''VOCAB = 128256


class Model(nn.Module):
    """A language model's head and its loss: hidden states projected to a 128k vocabulary (Llama 3's), then the
    mean cross-entropy of the next tokens."""
    def __init__(self, hidden):
        super().__init__()
        self.lm_head = nn.Linear(hidden, VOCAB, bias=False)

    def forward(self, h, labels):
        return F.cross_entropy(self.lm_head(h), labels)


def get_inputs():
    return [torch.randn(tokens, hidden), torch.randint(0, VOCAB, (tokens,))]


def get_init_inputs():
    return [hidden]
''', [(4096, 4096), (8192, 4096)]),
}


def task_name(op: str, shape: tuple[int, int]) -> str:
    return f"{op}_{shape[0]}x{shape[1]}"


def task_source(op: str, shape: tuple[int, int]) -> str:
    return HEAD + f"tokens, hidden = {shape[0]}, {shape[1]}\n\n\n" + TASKS[op][0]


# --- Liger-Kernel, where it has the op ---------------------------------------------------------------------
def liger_fn(op: str, model: torch.nn.Module):
    """Liger-Kernel's function computing what `model` does, called with the task's inputs; raises
    ImportError where liger_kernel is not installed or has no such kernel."""
    import liger_kernel.transformers.functional as lf
    if op == "rmsnorm":
        return lambda x: lf.liger_rms_norm(x, model.weight, 1e-6)
    if op == "layernorm":
        return lambda x: lf.liger_layer_norm(x, model.norm.weight, model.norm.bias, 1e-5)
    if op == "cross_entropy":
        return lambda logits, labels: lf.liger_cross_entropy(logits, labels)
    if op == "swiglu":
        return lf.liger_swiglu
    if op == "geglu":
        return lf.liger_geglu
    if op == "rope":
        return lambda q, k, cos, sin: lf.liger_rope(q, k, cos[None], sin[None])
    if op == "softmax":
        from liger_kernel.transformers.softmax import LigerSoftmax
        return LigerSoftmax()
    if op == "add_rmsnorm":
        return lambda x, residual: lf.liger_fused_add_rms_norm(x, residual, model.weight, 1e-6)
    if op == "dyt":
        return lambda x: lf.liger_dyt(x, model.alpha, model.gamma, model.beta)
    if op == "poly_norm":
        return lambda x: lf.liger_poly_norm(x, model.weight, model.bias, 1e-6)
    if op == "kl_div":
        return lambda log_q, p: lf.liger_kl_div(log_q, p, reduction="batchmean")
    if op == "jsd":
        return lambda log_q, log_p: lf.liger_jsd(log_q, log_p, beta=0.5)
    if op == "tvd":
        return lambda p, q: lf.liger_tvd(p, q, reduction="batchmean")
    if op == "linear_cross_entropy":
        return lambda h, labels: lf.liger_fused_linear_cross_entropy(h, model.lm_head.weight, labels)
    raise ImportError(f"no Liger kernel for {op}")


# --- measuring ---------------------------------------------------------------------------------------------
@dataclass
class Row:
    op: str
    shape: str  # tokens x hidden
    floor_ms: float | None = None
    ms: dict = field(default_factory=dict)  # "eager", "compile", "liger", "kernelwright" -> median ms
    err: dict = field(default_factory=dict)  # the same keys -> relative error against the fp32 run
    notes: list = field(default_factory=list)  # why a column is empty
    host_us: dict = field(default_factory=dict)  # the same keys -> the host's time per call (tools/profile.host_us)
    copy_ms: float | None = None  # a device copy of as many bytes, half read and half written, timed the same way

    def best_over_floor(self) -> float | None:
        kw, floor = self.ms.get("kernelwright"), self.floor_ms
        return kw / floor if kw and floor else None


def rel_err(out, ref) -> float:
    """The largest, over outputs, of ||out - ref|| / ||ref|| in fp64."""
    outs, refs = torch.utils._pytree.tree_flatten(out)[0], torch.utils._pytree.tree_flatten(ref)[0]
    worst = 0.0
    for o, r in zip(outs, refs):
        o, r = o.double(), r.double()
        worst = max(worst, float((o - r).norm() / r.norm().clamp_min(1e-30)))
    return worst


def measure(op: str, shape: tuple[int, int], module, best: Path | None, ceilings: dict, status: str = "done") -> Row:
    """One task's row: every implementation timed on the same bf16 inputs and checked against fp32. `status` is
    the build's for the task (batch.json): a task it did not finish has no kernel to time yet."""
    from tools.profile import count_work, floor_ms, host_us, time_call
    from tools.task import import_file
    row = Row(op, f"{shape[0]}x{shape[1]}")
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).to(dev, torch.bfloat16).eval()
    torch.manual_seed(1)
    inputs = [x.to(dev, torch.bfloat16) if x.is_floating_point() else x.to(dev) for x in module.get_inputs()]
    with torch.no_grad():
        ref = copy.deepcopy(model).float()(*[x.float() if x.is_floating_point() else x for x in inputs])
    flops, nbytes = count_work(model, inputs)
    row.floor_ms = floor_ms(flops, nbytes, ceilings, "matmul_half_flops")  # the LM head's products set its own
    src = torch.randn(int(nbytes) // 4, device=dev, dtype=torch.bfloat16)  # 2-byte elements, read once, written once
    dst = torch.empty_like(src)
    row.copy_ms = time_call(lambda: dst.copy_(src), dev).median_ms
    del src, dst
    impls = {"eager": model, "compile": torch.compile(model)}
    try:
        impls["liger"] = liger_fn(op, model)
    except ImportError as e:
        row.notes.append(f"liger: {e}")
    if best is None and status != "done":
        row.notes.append(f"kernelwright: not built ({status} when the build's time ran out; the same --out resumes it)")
    elif best is None:
        row.notes.append("kernelwright: no verified kernel (see OUT/runs)")
    else:
        candidate = import_file(best, f"kw_best_{op}_{row.shape}").ModelNew(*module.get_init_inputs())
        candidate = candidate.to(dev, torch.bfloat16).eval()
        candidate.load_state_dict(model.state_dict())
        impls["kernelwright"] = candidate
    for name, fn in impls.items():
        with torch.no_grad():
            row.err[name] = rel_err(fn(*[x.clone() for x in inputs]), ref)  # clones: Liger may write its inputs
            row.ms[name] = time_call(lambda: fn(*inputs), dev).median_ms
            row.host_us[name] = host_us(lambda: fn(*inputs))
    return row


# --- the table ---------------------------------------------------------------------------------------------
COLUMNS = ("eager", "compile", "liger", "kernelwright")


def table(rows: list[Row]) -> list[str]:
    """Markdown lines: per task the times, kernelwright's time over the floor and against Liger and compile,
    every error against fp32, then the geomeans."""
    def ms(v):
        return f"{v:.4f}" if v is not None else "-"

    def ratio(a, b):
        return f"{a / b:.2f}" if a and b else "-"

    head = ["op", "tokens x hidden", "floor ms", "copy ms"] + [f"{c} ms" for c in COLUMNS] + \
        ["kw/floor", "kw/copy", "liger/floor", "liger/kw", "compile/kw", "errors vs fp32 (eager, compile, liger, kw)",
         "host us per call (eager, compile, liger, kw)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        errs = ", ".join(f"{r.err[c]:.1e}" if c in r.err else "-" for c in COLUMNS)
        hosts = ", ".join(f"{r.host_us[c]:.0f}" if c in r.host_us else "-" for c in COLUMNS)
        lines.append(f"| {r.op} | {r.shape} | {ms(r.floor_ms)} | {ms(r.copy_ms)} | " +
                     " | ".join(ms(r.ms.get(c)) for c in COLUMNS) +
                     f" | {ratio(r.ms.get('kernelwright'), r.floor_ms)} | {ratio(r.ms.get('kernelwright'), r.copy_ms)}"
                     f" | {ratio(r.ms.get('liger'), r.floor_ms)}"
                     f" | {ratio(r.ms.get('liger'), r.ms.get('kernelwright'))}"
                     f" | {ratio(r.ms.get('compile'), r.ms.get('kernelwright'))} | {errs} | {hosts} |")

    def gm(key_a, key_b):
        return geomean(r.ms[key_a] / r.ms[key_b] for r in rows if r.ms.get(key_a) and r.ms.get(key_b))

    summary = {"kernelwright best/floor": geomean(r.best_over_floor() for r in rows),
               "kernelwright best/copy": geomean(r.ms["kernelwright"] / r.copy_ms for r in rows
                                                 if r.ms.get("kernelwright") and r.copy_ms),
               "Liger/floor": geomean(r.ms["liger"] / r.floor_ms for r in rows if r.ms.get("liger") and r.floor_ms),
               "speedup of kernelwright over Liger": gm("liger", "kernelwright"),
               "speedup of kernelwright over torch.compile": gm("compile", "kernelwright"),
               "speedup of kernelwright over eager": gm("eager", "kernelwright")}
    lines += [""] + [f"- geomean {k}: {v:.3f}" if v is not None else f"- geomean {k}: -" for k, v in summary.items()]
    notes = [f"- {r.op} {r.shape}: {n}" for r in rows for n in r.notes]
    return lines + ([""] + notes if notes else [])


# --- the build ---------------------------------------------------------------------------------------------
# time for the process's start, which the first task by name pays: on an H200 (session 29) cross-entropy over
# 2048x128256, first by name, got one evaluation in a share of 20 and of 26 s where the others got two to four
WARM_UP_S = 60.0
TASK_SECONDS = 24.0  # the build's default share a task: 14 tasks took 330 s in sessions 40 and 54


def build(tasks: Path, runs: Path, budget: int, seconds: float) -> int:
    """`kernelwright batch` over the task folder in bf16, no LLM, resumed where OUT/runs holds a build, one
    worker per GPU here; each task gets an equal share of `seconds` times the workers, plus WARM_UP_S for the
    process's start that the first task pays, the whole build `seconds`."""
    workers = max(torch.cuda.device_count(), 1)
    share = max(20.0, seconds * workers / max(1, len(list(tasks.glob("*.py"))))) + WARM_UP_S
    cmd = [sys.executable, "-m", "agent.cli", "batch", str(tasks), "--out", str(runs), "--budget", str(budget),
           "--dtype", "bfloat16", "--max-seconds", f"{seconds:.0f}", "--time-limit", f"{share:.0f}",
           "--workers", str(workers), "--no-knowledge"] + (["--resume"] if (runs / "batch.json").is_file() else [])
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    print(" ".join(cmd[2:]), flush=True)
    with open(runs.parent / "build.log", "a") as log:
        return subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "llm_ops"),
                   help="output folder: OUT/tasks, OUT/runs (the build), OUT/llm_ops.md, OUT/llm_ops.json")
    p.add_argument("--ops", default=",".join(TASKS), help=f"comma-separated ops (default all: {','.join(TASKS)})")
    p.add_argument("--budget", type=int, default=3, help="evaluations per task in the build (default 3)")
    p.add_argument("--build-seconds", type=float, default=None,
                   help=f"seconds for the build, shared equally by the tasks (default {TASK_SECONDS:.0f} a task)")
    args = p.parse_args(argv)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = [o for o in ops if o not in TASKS]
    if unknown:
        print(f"Unknown op(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}.", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("llm_ops_bench times kernels on a CUDA GPU and this machine has none; run it on a GPU host.",
              file=sys.stderr)
        return 2
    from tools.evaluate import cache_dir
    from tools.profile import device_ceilings
    from tools.task import import_file
    out, tasks = Path(args.out), Path(args.out) / "tasks"  # a folder that stays, so a later call resumes the build
    (out / "runs").mkdir(parents=True, exist_ok=True)
    tasks.mkdir(exist_ok=True)
    rows, names = [], {}
    for op in ops:
        for shape in TASKS[op][1]:
            names[(op, shape)] = task_name(op, shape)
            (tasks / f"{names[(op, shape)]}.py").write_text(task_source(op, shape))
    seconds = args.build_seconds or TASK_SECONDS * len(names)
    code = build(tasks, out / "runs", args.budget, seconds)
    print(f"build exited {code} (its log: {out / 'build.log'})", flush=True)
    ceilings = device_ceilings(cache_dir())
    state = out / "runs" / "batch.json"
    statuses = json.loads(state.read_text())["tasks"] if state.is_file() else {}
    for (op, shape), name in names.items():
        best = out / "runs" / name / "best.py"
        module = import_file(tasks / f"{name}.py", f"kw_task_{name}")
        rows.append(measure(op, shape, module, best if best.is_file() else None, ceilings,
                            statuses.get(name, {}).get("status", "not started")))
        print(f"{name}: " + ", ".join(f"{k} {v:.4f} ms" for k, v in rows[-1].ms.items()), flush=True)
    lines = [f"# LLM ops, bf16, {torch.cuda.get_device_name()}, torch {torch.__version__}", ""] + table(rows)
    print("\n".join(lines))
    (out / "llm_ops.md").write_text("\n".join(lines) + "\n")
    (out / "llm_ops.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
