"""Recurrent layers in one persistent launch (the rnn template's `persist` form): a program owns a slice of one
layer-direction's hidden units for the whole sequence, with its cell state (and for a GRU its previous hidden
units) in registers, and steps through time inside the kernel. The host-stepped form (rnn_kernel.py) launches a
kernel per step, layer and direction (3,072 for a 6-layer LSTM over 512 steps) and ran 3-8x slower than cuDNN
on an H100 (session 74).

Programs meet through a counter per layer-direction: a program adds 1 to its own once its units of a step are
stored. Before step s a program waits until its layer-direction's counter reaches s x SLICES (every slice's
previous hidden state is in), and, above the first layer, until the layer below has stored the step's time in
each of its directions, so the layers run as a wavefront, a step apart. The hidden state passes between slices
through a two-step ring (`hx`), read past L1 (.cg); the sequence a layer hands the next is fp32 scratch.

The launch is cooperative on a GPU (every program resident at once, or the launch fails), since a slice waits
for its peers. The interpreter runs programs one at a time, in order: there a layer-direction is one program
(SLICES 1), whose waits are only on lower programs, already done.

    code = render_persistent(kernel, "_rnn_kernel0", {"SLICES": 16, "BLOCK_K": 64, "num_warps": 4})
"""
from __future__ import annotations

import torch

from agent.templates.codegen import SMEM_BYTES, SMS, KernelCode, indent, next_pow2
from agent.templates.ir import Leaf
from agent.templates.schedule import Kernel

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
MAX_BLOCK_B = 64  # batch rows a program takes; a larger batch is cut into blocks, each with programs of its own


def default_slices(layers: int, dirs: int, hidden: int) -> int:
    """Programs a layer-direction (and batch block: `layers` counts them too): as many as leave every program of
    the launch an SM of its own, each with at least 16 hidden units."""
    return max(1, min(SMS // (layers * dirs), max(1, hidden // 16)))


def shared_bytes(block_b: int, block_k: int, columns: int, stages: int) -> int:
    """The shared memory a program takes: its products' K steps stage a [block_b, block_k] row tile and a
    [block_k, columns] weight tile in 2 x (stages - 1) buffers each, or, unpipelined, the weight tile once.
    Triton 3.9 compiling for sm_90 asked exactly this at 1 to 4 stages, 16 to 64 rows and 64 to 256 columns; an
    H100 refused the 278,528 bytes of 64 units of 4 gates at 3 stages (session 75)."""
    if stages <= 1:
        return columns * block_k * 4
    return (block_b + columns) * block_k * 4 * 2 * (stages - 1)


def _cell(mode: str) -> list[str]:
    """The gate math on the input products ax and the hidden products ah ([BLOCK_B, G x BLOCK_H], a unit's
    gates side by side, biases in): the cell state c and the previous hidden units hp are the program's own
    registers. A GRU's candidate gate takes its hidden product apart (r x its product)."""
    if mode in ("rnn_tanh", "rnn_relu"):
        return ["h = _tanh(ax + ah)" if mode == "rnn_tanh" else "h = tl.maximum(ax + ah, 0.0)"]
    lines = []
    for acc, names in [("ax", "x"), ("ah", "h")] if mode == "gru" else [("ax + ah", "a")]:  # gates 0-3 of each
        lines += [f"{names}02, {names}13 = tl.split(tl.reshape({acc}, (BLOCK_B, BLOCK_H, 2, 2)))",
                  f"{names}0, {names}2 = tl.split({names}02)", f"{names}1, {names}3 = tl.split({names}13)"]
    if mode == "lstm":
        return lines + ["c = tl.sigmoid(a1) * c + tl.sigmoid(a0) * _tanh(a2)", "h = tl.sigmoid(a3) * _tanh(c)"]
    return lines + ["r = tl.sigmoid(x0 + h0)", "z = tl.sigmoid(x1 + h1)", "n = _tanh(x2 + r * h2)",
                    "h = (1.0 - z) * n + z * hp"]


def _wait(counter: str, need: str) -> list[str]:
    """Polls the counter of layer-direction `counter` and the program's batch block until it reaches `need`."""
    at = f"sync_ptr + ({counter}) * NB + bb"
    return [f"seen = tl.atomic_add({at}, 0, sem=\"acquire\")", f"while seen < {need}:",
            f"    seen = tl.atomic_add({at}, 0, sem=\"acquire\")"]


def _products(v: str, width: str, weights: str, acc: str, batch: int, cached: bool, precision: str) -> list[str]:
    """A K loop adding to `acc` the product of the rows at `v` (an address of row rb and column kk) with the
    program's gate rows of `weights` ([gates x H, width]): one product for every gate (columns wr)."""
    hint = ", cache_modifier=\".cg\"" if cached else ""
    body = ["kk = k0 + rk",
            f"v = tl.load({v}, mask=(rb < {batch}) & (kk[None, :] < {width}), other=0.0{hint}).to(tl.float32)",
            f"w = tl.load({weights} + wr * {width} + kk[:, None], mask=wm & (kk[:, None] < {width}), "
            "other=0.0).to(tl.float32)",
            f"{acc} += tl.dot(v, w, input_precision=\"{precision}\")"]
    return [f"for k0 in range(0, {width}, BLOCK_K):"] + indent(body)


def _ahead(body: list[str]) -> list[str]:
    """A bidirectional layer's input products for every time, in the order the layer below stores the times:
    its two directions meet in the middle, so time t is in after max(t, T - 1 - t) of their steps. Run while
    the layer below steps (this layer cannot start before the layer's last step), they leave each step only its
    hidden products: `body` computes time t's."""
    return ["for k in range((T + 1) // 2):", "    lo = (T - 1) // 2 - k", "    hi = T // 2 + k",
            "    for e in range(2):", "        t = lo + e * (hi - lo)",
            "        if (e == 0) | (hi != lo):"] + indent(body, 3)


def _source(name: str, mode: str, layers: int, dirs: int, batch: int, biases: bool, precision: str) -> str:
    gates, per = GATES[mode], 4 if biases else 2
    fused = next_pow2(gates)  # a unit's gates side by side in the products' columns (a GRU's third one padded)
    width = f"{dirs} * H"  # the input width above the first layer
    bh = f"{batch} * H"  # one layer-direction's hidden state
    lines = ["pid = tl.program_id(0)", "lid = pid // (S * NB)", "bb = pid // S % NB", "layer = lid // %d" % dirs,
             "d = lid %% %d" % dirs, "rb = bb * BLOCK_B + tl.arange(0, BLOCK_B)[:, None]",
             "rj = (pid % S) * BLOCK_H + tl.arange(0, BLOCK_H)[None, :]",
             f"mask = (rb < {batch}) & (rj < H)", "rk = tl.arange(0, BLOCK_K)",
             f"rc = tl.arange(0, {fused} * BLOCK_H)[None, :]",  # a product column: unit rc // G, gate rc % G
             f"ru = (pid % S) * BLOCK_H + rc // {fused}",
             f"wr = (rc % {fused}) * H + ru", f"wm = (rc % {fused} < {gates}) & (ru < H)"]
    weights = ["wih", "whh", "bih", "bhh"][:per]
    lines += [f"{w} = w{i}" for i, w in enumerate(weights)]
    for lid in range(1, layers * dirs):
        lines += [f"if lid == {lid}:"] + [f"    {w} = w{lid * per + i}" for i, w in enumerate(weights)]
    own = f"lid * {bh} + rb * H + rj"
    lines += [f"hp = tl.load(h0_ptr + h0_off + {own}, mask=mask, other=0.0).to(tl.float32)", "h = hp"]
    if mode == "lstm":
        lines.append(f"c = tl.load(c0_ptr + c0_off + {own}, mask=mask, other=0.0).to(tl.float32)")
    zero = f"tl.zeros((BLOCK_B, {fused} * BLOCK_H), dtype=tl.float32)"
    if biases:  # constant over time: loaded once
        lines += ["bx = tl.load(bih + wr, mask=wm, other=0.0).to(tl.float32)",
                  "bhid = tl.load(bhh + wr, mask=wm, other=0.0).to(tl.float32)"]
    below = _wait(f"lid - d - {dirs}", "(t + 1) * S")  # the layer below has stored time t
    if dirs == 2:
        below += _wait("lid - d - 1", "(T - t) * S")
    ax = [f"ax = {zero}" + (" + bx" if biases else "")]
    x_row = "x_ptr + x_off + t * x_t + rb * x_b + kk[None, :] * x_col"
    seq_row = f"seq_ptr + ((layer - 1) * T + t) * {batch} * {width} + rb * {width} + kk[None, :]"
    seq_products = _products(seq_row, width, "wih", "ax", batch, True, precision)
    xw = f"S * {fused} * BLOCK_H"  # a row of the input products: every slice's columns
    xp = f"xp_ptr + (((layer % 2) * 2 + d) * T + t) * {batch} * {xw} + rb * {xw} + (pid % S) * {fused} * BLOCK_H + rc"
    if dirs == 2:  # the input products of a layer above the first, ahead of its steps (_ahead)
        lines += ["if layer > 0:"] + indent(
            _ahead(below + ax + seq_products + [f"tl.store({xp}, ax, mask=rb < {batch})"]))
        lines.append("tl.debug_barrier()")  # the steps read them in other threads' layout
    step = ["t = s + d * (T - 1 - 2 * s)"]
    step += ["if s > 0:"] + indent(_wait("lid", "s * S"))
    step += ["if layer == 0:"] + indent(ax + _products(x_row, "IN", "wih", "ax", batch, False, precision))
    if dirs == 2:
        step += ["else:", f"    ax = tl.load({xp}, mask=rb < {batch}, other=0.0, cache_modifier=\".cg\")"]
    else:
        step += ["else:"] + indent(below + ax + seq_products)
    step.append(f"ah = {zero}" + (" + bhid" if biases else ""))
    h0_row = f"h0_ptr + h0_off + lid * {bh} + rb * H + kk[None, :]"
    ring_row = f"hx_ptr + (lid * 2 + (s - 1) % 2) * {bh} + rb * H + kk[None, :]"
    step += ["if s == 0:"] + indent(_products(h0_row, "H", "whh", "ah", batch, False, precision))
    step += ["else:"] + indent(_products(ring_row, "H", "whh", "ah", batch, True, precision))
    step += _cell(mode)
    step += [f"tl.store(hx_ptr + (lid * 2 + s % 2) * {bh} + rb * H + rj, h, mask=mask)",
             f"if layer == {layers - 1}:",
             "    tl.store(out_ptr + out_off + t * out_t + rb * out_b + d * H + rj, h, mask=mask)",
             "else:",
             f"    tl.store(seq_ptr + (layer * T + t) * {batch} * {width} + rb * {width} + d * H + rj, h, mask=mask)",
             "tl.debug_barrier()", "tl.atomic_add(sync_ptr + lid * NB + bb, 1, sem=\"release\")", "hp = h"]
    lines += ["for s in range(T):"] + indent(step)
    lines.append(f"tl.store(hn_ptr + {own}, h, mask=mask)")
    if mode == "lstm":
        lines.append(f"tl.store(cn_ptr + {own}, c, mask=mask)")
    args = ["x_ptr", "x_off", "x_t", "x_b", "x_col", "h0_ptr", "h0_off", "c0_ptr", "c0_off"]
    args += [f"w{i}" for i in range(layers * dirs * per)]
    args += ["hx_ptr", "seq_ptr", "xp_ptr", "sync_ptr", "out_ptr", "out_off", "out_t", "out_b", "hn_ptr", "cn_ptr",
             "IN", "H: tl.constexpr", "T: tl.constexpr", "S: tl.constexpr", "NB: tl.constexpr", "BLOCK_B: tl.constexpr",
             "BLOCK_H: tl.constexpr", "BLOCK_K: tl.constexpr"]
    return "\n".join(["@triton.jit", f"def {name}({', '.join(args)}):"] + indent(lines))


def render_persistent(kernel: Kernel, name: str, p: dict) -> KernelCode:
    node = kernel.nodes[0]
    x, h0, c0 = node.args[:3]
    weights = node.args[3:]
    a = node.attrs
    mode, layers, dirs = node.fn, a["layers"], 2 if a["bidirectional"] else 1
    hidden = h0.shape[-1]
    steps, batch = (x.shape[1], x.shape[0]) if a["batch_first"] else (x.shape[0], x.shape[1])
    out = kernel.stores[node]
    state = (layers * dirs, batch, hidden)
    block_b = min(p.get("BLOCK_B", MAX_BLOCK_B), max(16, next_pow2(batch)))
    blocks = -(-batch // block_b)  # batch blocks: each one's recurrence is its own
    if layers * dirs * blocks > SMS:
        raise ValueError(f"The persistent recurrent kernel keeps a program per layer, direction and block of "
                         f"{block_b} batch rows resident at once: {layers * dirs * blocks} of them are more than a "
                         f"GPU of {SMS} SMs holds.")
    temps = {f"{out}_h": (state, torch.float32), f"{out}_hx": ((layers * dirs, 2, batch, hidden), torch.float32),
             f"{out}_seq": ((max(1, layers - 1), steps, batch, dirs * hidden), torch.float32),
             f"{out}_sync": ((layers * dirs * blocks,), torch.int32)}
    if mode == "lstm":
        temps[f"{out}_c"] = (state, torch.float32)
    host, args = [], {x.base: "x"}

    def start(role: str, s: Leaf | None) -> str:  # an initial state's pointer and offset
        if s is None:
            return f"{out}_h, 0"  # no cell state (a GRU or RNN): never read
        if s.kind == "const":  # a state the forward makes (zeros where none is passed): a buffer filled with it
            temps[f"{out}_{role}"] = (state, torch.float32)
            host.append(f"{out}_{role}.fill_({s.value!r})")
            return f"{out}_{role}, 0"
        args[s.base] = role
        return f"{{{role}}}, {s.offset}"

    h_start, c_start = start("h0", h0), start("c0", c0 if mode == "lstm" else None)
    args |= {w.base: f"w{i}" for i, w in enumerate(weights)}
    xs = tuple(x.strides)
    t_x, b_x = (xs[1], xs[0]) if a["batch_first"] else (xs[0], xs[1])
    width = dirs * hidden
    t_out, b_out = (width, steps * width) if a["batch_first"] else (batch * width, width)
    slices = p.get("SLICES", default_slices(layers * blocks, dirs, hidden))
    fused = next_pow2(GATES[mode])
    ws = ", ".join(f"{{w{i}}}" for i in range(len(weights)))
    cn = f"{out}_c" if mode == "lstm" else f"{out}_h"
    gpu_bh = max(16 // fused, next_pow2(-(-hidden // slices)))  # the units a program takes on a GPU
    stages, block_k = p.get("num_stages", 3), p.get("BLOCK_K", 64)
    need = shared_bytes(block_b, block_k, fused * gpu_bh, stages)
    if need > SMEM_BYTES:
        raise ValueError(f"The persistent recurrent kernel's products would take {need} bytes of shared memory a "
                         f"program ({slices} slices of {gpu_bh} units, BLOCK_K {block_k}, {stages} stages), more "
                         f"than the {SMEM_BYTES} a block has.")
    host += [f"sl = {slices} if {{x}}.is_cuda else 1  # the interpreter runs one program at a time",
             f"bh = max({16 // fused}, triton.next_power_of_2(-(-{hidden} // sl)))", f"sl = -(-{hidden} // bh)"]
    xp = f"{out}_hx"  # the input products computed ahead (a bidirectional layer above the first's): two layers'
    if dirs == 2 and layers > 1:
        xp = f"{out}_xp"
        host.append(f"{xp} = torch.empty((4, {steps}, {batch}, sl * {fused} * bh), device={{x}}.device, "
                    "dtype=torch.float32)")
    host.append(f"{name}[({layers * dirs * blocks} * sl,)]({{x}}, {x.offset}, {t_x}, {b_x}, {xs[-1]}, {h_start}, "
                f"{c_start}, {ws}, {out}_hx, {out}_seq, {xp}, {out}_sync, {out}, 0, {t_out}, {b_out}, {out}_h, {cn}, "
                f"{x.shape[-1]}, H={hidden}, T={steps}, S=sl, NB={blocks}, BLOCK_B={block_b}, BLOCK_H=bh, "
                f"BLOCK_K={block_k}, launch_cooperative_grid={{x}}.is_cuda, "
                f"num_warps={p.get('num_warps', 8 if dirs == 2 else 4)}, num_stages={stages})")
    source = _source(name, mode, layers, dirs, batch, a["has_biases"], p.get("precision", "tf32x3"))
    return KernelCode(source, [], temps, host=host, host_args=args)
