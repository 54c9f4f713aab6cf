"""What the store reads out of Python source: normalized code for dedup, kernel headers, op families.

Nothing here imports or runs the code it reads.
"""
from __future__ import annotations

import ast
import hashlib
import io
import re
import tokenize

FAMILIES = ("matmul", "conv", "attention", "norm", "softmax", "pool", "scan", "reduction",
            "elementwise")

# Cues in a task or kernel source that name an op family, most specific family first.
_FAMILY_CUES: dict[str, tuple[str, ...]] = {
    "attention": ("scaled_dot_product_attention", "multiheadattention", "flash_attn"),
    "conv": ("conv1d", "conv2d", "conv3d", "conv_transpose", "convtranspose", "unfold"),
    "matmul": ("matmul", "linear", "bmm", "addmm", "baddbmm", "einsum", "tl.dot", "mm(", " @ "),
    "norm": ("layer_norm", "layernorm", "rms_norm", "rmsnorm", "batch_norm", "batchnorm",
             "group_norm", "groupnorm", "instance_norm", "instancenorm", "normalize("),
    "softmax": ("softmax", "log_softmax", "logsoftmax", "cross_entropy"),
    "pool": ("max_pool", "maxpool", "avg_pool", "avgpool", "adaptive_"),
    "scan": ("cumsum", "cumprod", "cummax", "cummin", "associative_scan", "logcumsumexp"),
    "reduction": ("logsumexp", "sum(", "mean(", "amax", "amin", "argmax", "argmin", ".max(", ".min(", "prod(",
                  "norm(", "var(", "std(", "tl.sum", "tl.max"),
}

# Family names that task files declare ("Family: loss") mapped onto the store's families.
FAMILY_ALIASES = {"argreduce": "reduction", "loss": "reduction", "gemm": "matmul", "gemm_epilogue": "matmul",
                  "matvec": "matmul", "linear": "matmul", "pooling": "pool", "normalization": "norm",
                  "activation": "elementwise", "convolution": "conv", "cumulative": "scan"}

# Words added to a task's query so that its family's playbooks and kernels come back.
FAMILY_TERMS: dict[str, str] = {
    "matmul": "matmul gemm tl.dot tiling BLOCK_M BLOCK_N BLOCK_K epilogue bias activation grouped ordering",
    "conv": "convolution implicit gemm im2col stencil window tl.dot",
    "attention": "attention online softmax flash tiles tl.dot",
    "norm": "normalization layer norm mean variance rsqrt eps row reduction",
    "softmax": "row softmax max exp sum online looped reduction",
    "pool": "pooling window max pool stride padding kernel_size",
    "scan": "scan cumulative prefix sum tl.cumsum associative_scan",
    "reduction": "row reduction sum mean max along dim tl.sum accumulate fp32",
    "elementwise": "elementwise memory-bound fusion activation broadcast BLOCK_SIZE",
}


def normalize_code(source: str) -> str:
    """The code with comments, docstrings and layout removed: equal for the same program."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return " ".join(re.sub(r"#[^\n]*", "", source).split())
    out: list[str] = []
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER}
    prev = tokenize.NEWLINE
    for i, tok in enumerate(toks):
        if tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            nxt = next((t.type for t in toks[i + 1:] if t.type != tokenize.COMMENT), tokenize.NEWLINE)
            if nxt in (tokenize.NEWLINE, tokenize.ENDMARKER):  # a docstring or a bare string statement
                continue
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type
        if tok.type not in skip:
            out.append(tok.string)
    return " ".join(out)


def code_hash(source: str) -> str:
    return hashlib.sha256(normalize_code(source).encode()).hexdigest()


def kernel_header(source: str) -> dict[str, str]:
    """The `key: value` lines of a kernel file's module docstring, plus `title` (its first line)."""
    try:
        doc = ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        return {}
    lines = doc.strip().splitlines()
    head: dict[str, str] = {"title": lines[0].strip()} if lines else {}
    for line in lines[1:]:
        m = re.match(r"^([a-z_]+):\s*(.+)$", line.strip())
        if m:
            head[m.group(1)] = m.group(2).strip()
    return head


def declared_family(source: str) -> str | None:
    """The family a task or kernel file names in its docstring ("Family: norm"), mapped to FAMILIES."""
    m = re.search(r"^\s*family:\s*([A-Za-z_]+)", _module_doc(source), flags=re.M | re.I)
    if not m:
        return None
    name = m.group(1).lower()
    name = FAMILY_ALIASES.get(name, name)
    return name if name in FAMILIES else None


def infer_family(source: str) -> str:
    """The op family of a task or kernel: the one its docstring declares, else the first whose cues
    appear in the code ('elementwise' when nothing else fits)."""
    declared = declared_family(source)
    if declared:
        return declared
    text = source.lower()
    for family, cues in _FAMILY_CUES.items():
        if any(c in text for c in cues):
            return family
    return "elementwise"


def _module_doc(source: str) -> str:
    try:
        return ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        m = re.match(r'\s*(?:"""|\'\'\')(.*?)(?:"""|\'\'\')', source, flags=re.S)
        return m.group(1) if m else ""


def task_query(source: str) -> str:
    """A retrieval query for a task file: its family's vocabulary, the first line of its docstring and
    the torch functions and methods it calls."""
    family = infer_family(source)
    title = (_module_doc(source).strip().splitlines() or [""])[0]
    m = re.search(r"def forward\(.*?(?=\ndef |\nclass |\Z)", source, flags=re.S)
    body = m.group(0) if m else source
    names = re.findall(r"(?:torch|F|nn|functional)\.([A-Za-z_][A-Za-z0-9_]*)", source)
    names += re.findall(r"\.([a-z_][a-z0-9_]*)\(", body)
    skip = {"Module", "Parameter", "Tensor", "forward", "randn", "rand", "randint", "size", "tensor"}
    seen = " ".join(dict.fromkeys(n for n in names if n not in skip))
    return " ".join(p for p in (family, FAMILY_TERMS.get(family, ""), title, seen) if p)
