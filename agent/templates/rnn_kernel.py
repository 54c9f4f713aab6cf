"""Recurrent layers (nn.RNN with tanh or ReLU, nn.LSTM, nn.GRU; several layers, bidirectional, batch_first):
one Triton kernel per time step computes every gate of a block of hidden units for the whole batch (the
input and hidden products as tl.dot, biases and the gate math fused) and writes the step's hidden state
straight into the layer's output sequence, where the next step reads it. The candidate's forward loops over
layers, directions and time on the host; the cell state is updated in place (each program reads and writes
only its own units), the final states are written at every step so the last step's remain.

    code = render_rnn(kernel, "_rnn_kernel0", {"BLOCK_H": 32, "BLOCK_K": 32, "num_warps": 4})
    code.host   # the forward's loop, with {name} fields for the tensors it reads (code.host_args)
"""
from __future__ import annotations

import math

import torch

from agent.templates.codegen import KernelCode, next_pow2
from agent.templates.ir import Leaf
from agent.templates.rnn_persistent import GATES, render_persistent
from agent.templates.schedule import Kernel


def _cell(mode: str) -> list[str]:
    """The gate math on the accumulators a0.. (input and hidden products plus biases; for a GRU the hidden
    product of the candidate gate is kept apart in hn)."""
    if mode == "lstm":
        return ["ig = tl.sigmoid(a0)", "fg = tl.sigmoid(a1)", "gg = _tanh(a2)", "og = tl.sigmoid(a3)",
                "cp = tl.load(c_ptr + c_off + rb * H + rj, mask=mask, other=0.0).to(tl.float32)",
                "c = fg * cp + ig * gg", "h = og * _tanh(c)",
                "tl.store(cn_ptr + s_off + rb * H + rj, c, mask=mask)"]
    if mode == "gru":
        return ["r = tl.sigmoid(a0)", "z = tl.sigmoid(a1)", "n = _tanh(a2 + r * hn)",
                "hp = tl.load(h_ptr + h_off + rb * h_row + rj, mask=mask, other=0.0).to(tl.float32)",
                "h = (1.0 - z) * n + z * hp"]
    return ["h = _tanh(a0)" if mode == "rnn_tanh" else "h = tl.maximum(a0, 0.0)"]


def _source(name: str, mode: str, batch: int, hidden: int, biases: bool, precision: str) -> str:
    gates = GATES[mode]
    acc = [f"a{g}" for g in range(gates)]
    lines = ["pid = tl.program_id(0)", "rb = tl.arange(0, BLOCK_B)[:, None]",
             "rj = pid * BLOCK_H + tl.arange(0, BLOCK_H)[None, :]", f"mask = (rb < {batch}) & (rj < H)",
             "rk = tl.arange(0, BLOCK_K)"]
    lines += [f"{a} = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)" for a in acc]
    if mode == "gru":
        lines.append("hn = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)")

    def products(src: str, col: str, width: str, weights: str, into: list[str]) -> list[str]:
        body = ["kk = k0 + rk",
                f"v = tl.load({src}_ptr + {src}_off + rb * {src}_row + kk[None, :]{col}, "
                f"mask=(rb < {batch}) & (kk[None, :] < {width}), other=0.0).to(tl.float32)"]
        for g, a in enumerate(into):
            body += [f"w = tl.load({weights} + ({g} * H + rj) * {width} + kk[:, None], "
                     f"mask=(rj < H) & (kk[:, None] < {width}), other=0.0).to(tl.float32)",
                     f'{a} += tl.dot(v, w, input_precision="{precision}")']
        return [f"for k0 in range(0, {width}, BLOCK_K):"] + ["    " + b for b in body]

    lines += products("x", " * x_col", "IN", "wih_ptr", acc)
    lines += products("h", "", "H", "whh_ptr", acc[:2] + ["hn"] if mode == "gru" else acc)
    if biases:
        for g, a in enumerate(acc):
            b_ih = f"tl.load(bih_ptr + {g} * H + rj, mask=rj < H, other=0.0).to(tl.float32)"
            b_hh = f"tl.load(bhh_ptr + {g} * H + rj, mask=rj < H, other=0.0).to(tl.float32)"
            if mode == "gru" and g == 2:
                lines += [f"{a} += {b_ih}", f"hn += {b_hh}"]
            else:
                lines.append(f"{a} += {b_ih} + {b_hh}")
    lines += _cell(mode)
    lines += ["tl.store(out_ptr + out_off + rb * out_row + rj, h, mask=mask)",
              "tl.store(hn_ptr + s_off + rb * H + rj, h, mask=mask)"]
    args = ["x_ptr", "x_off", "x_row", "x_col", "h_ptr", "h_off", "h_row", "c_ptr", "c_off", "wih_ptr", "whh_ptr",
            "bih_ptr", "bhh_ptr", "out_ptr", "out_off", "out_row", "hn_ptr", "cn_ptr", "s_off", "IN",
            "H: tl.constexpr", "BLOCK_B: tl.constexpr", "BLOCK_H: tl.constexpr", "BLOCK_K: tl.constexpr"]
    return "\n".join(["@triton.jit", f"def {name}({', '.join(args)}):"] + ["    " + line for line in lines])


def render_rnn(kernel: Kernel, name: str, p: dict) -> KernelCode:
    if p.get("persist"):
        return render_persistent(kernel, name, p)
    node = kernel.nodes[0]
    x, h0, c0 = node.args[:3]
    weights = node.args[3:]
    a = node.attrs
    mode, layers, dirs = node.fn, a["layers"], 2 if a["bidirectional"] else 1
    per = 4 if a["has_biases"] else 2  # tensors per layer and direction: w_ih, w_hh(, b_ih, b_hh)
    hidden = h0.shape[-1]
    steps, batch = (x.shape[1], x.shape[0]) if a["batch_first"] else (x.shape[0], x.shape[1])
    block_h = min(p.get("BLOCK_H", 32), max(16, next_pow2(hidden)))
    block_b = max(16, next_pow2(batch))
    out = kernel.stores[node]
    state = (layers * dirs, batch, hidden)
    temps = {f"{out}_h": (state, torch.float32), f"{out}_c": (state, torch.float32)}
    host, args = [], {x.base: "x"}
    for role, s in (("h0", h0), ("c0", c0)):  # an initial state the forward makes (zeros where none is passed):
        if s is not None and s.kind == "const":  # a state buffer filled with it
            temps[f"{out}_{role}"] = (state, torch.float32)
            host.append(f"{out}_{role}.fill_({s.value!r})")
        elif s is not None:
            args[s.base] = role
    args |= {w.base: f"w{i}" for i, w in enumerate(weights)}

    def first(role: str, s: Leaf, i: int) -> str:  # the pointer and offset of layer-direction i's initial state
        at = i * batch * hidden
        return f"{out}_{role}, {at}" if s.kind == "const" else f"{{{role}}}, {s.offset + at}"

    xs = tuple(x.strides)
    # (time stride, batch stride) of the input and of each layer's output sequence (batch-first or not)
    t_x, b_x = (xs[1], xs[0]) if a["batch_first"] else (xs[0], xs[1])
    seq = (steps, batch, dirs * hidden)
    width = dirs * hidden
    last_t, last_b = (width, steps * width) if a["batch_first"] else (batch * width, width)
    for layer in range(layers - 1):  # sequence buffers between layers, time-major
        temps[f"{out}_seq{layer % 2}"] = (seq, torch.float32)
    for layer in range(layers):
        src = ("{x}", t_x, b_x, xs[-1], x.offset, x.shape[-1]) if layer == 0 else \
            (f"{out}_seq{(layer - 1) % 2}", batch * width, width, 1, 0, width)
        dst = (out, last_t, last_b) if layer == layers - 1 else (f"{out}_seq{layer % 2}", batch * width, width)
        for d in range(dirs):
            i = layer * dirs + d
            w = [f"{{w{i * per + j}}}" for j in range(per)]
            bih, bhh = (w[2], w[3]) if per == 4 else (w[0], w[0])
            t = "s" if d == 0 else f"{steps - 1} - s"
            prev = "t - 1" if d == 0 else "t + 1"
            c_first = first("c0", c0, i) if c0 is not None else f"{out}_c, 0"
            host += [f"for s in range({steps}):", f"    t = {t}",
                     f"    hp, h_off, h_row = ({first('h0', h0, i)}, {hidden}) if s == 0 else "
                     f"({dst[0]}, ({prev}) * {dst[1]} + {d * hidden}, {dst[2]})",
                     f"    cp, c_off = ({c_first}) if s == 0 else ({out}_c, {i * batch * hidden})",
                     f"    {name}[({math.ceil(hidden / block_h)},)]({src[0]}, {src[4]} + t * {src[1]}, {src[2]}, "
                     f"{src[3]}, hp, h_off, h_row, cp, c_off, {w[0]}, {w[1]}, {bih}, {bhh}, {dst[0]}, "
                     f"t * {dst[1]} + {d * hidden}, {dst[2]}, {out}_h, {out}_c, {i * batch * hidden}, {src[5]}, "
                     f"H={hidden}, BLOCK_B={block_b}, BLOCK_H={block_h}, BLOCK_K={p.get('BLOCK_K', 32)}, "
                     f"num_warps={p.get('num_warps', 4)})"]
    source = _source(name, mode, batch, hidden, a["has_biases"], p.get("precision", "ieee"))
    return KernelCode(source, [], temps, host=host, host_args=args)
