"""How a kernel reduces: one-pass reductions of a row held in registers, per-lane accumulators carried
through a chunk loop, and two fusions that let a dependent reduction share its producer's pass: online
softmax (running max and rescaled sum of exp) and a pivoted one-pass mean/variance. Mixed into codegen.Gen,
whose tiles, scopes and value emission these methods use."""
from __future__ import annotations

import torch

from agent.templates.ir import Node
from agent.templates.pointwise_ops import f

NEUTRAL = {"sum": "0.0", "prod": "1.0", "max": '-float("inf")', "min": 'float("inf")',
           "argmax": '-float("inf")', "argmin": 'float("inf")'}
INT32_MAX = 2**31 - 1
COMBINES = {"max": "_max_combine", "min": "_min_combine", "prod": "_mul_combine"}  # pointwise_ops.HELPERS


def reduced(fn: str, x: str, axis, keep: bool = True) -> str:
    """The reduction `fn` (sum, max, min, prod) of the tile `x` along `axis` (None: all of it): a max or min over a
    NaN is NaN, as PyTorch's (tl.max and tl.min pass over it)."""
    dims = ", keep_dims=True" if keep else ""
    return f"tl.sum({x}, axis={axis}{dims})" if fn == "sum" else f"tl.reduce({x}, {axis}, {COMBINES[fn]}{dims})"


def integer_identity(fn: str, dtype: torch.dtype) -> str:
    """The neutral element of an integer sum, product, max (argmax) or min (argmin) over values of `dtype`."""
    info = torch.iinfo(dtype)
    return {"sum": "0", "prod": "1", "max": str(info.min), "argmax": str(info.min), "min": str(info.max),
            "argmin": str(info.max)}[fn]


def integer_type(dtype: torch.dtype) -> str:
    """The Triton type integers of `dtype` are computed in: int64's own, int32 for the narrower ones."""
    return "tl.int64" if dtype == torch.int64 else "tl.int32"


def integer_accumulator(r: Node) -> tuple[str, str] | None:
    """(neutral element, Triton dtype) an integer sum, max, min, argmax or argmin reduces in, exact at PyTorch's
    width (a sum of int32s is int64; a max not through float32); None for floats, booleans and products, which
    reduce in float32."""
    x = r.args[0]
    if x.dtype.is_floating_point or x.dtype == torch.bool or r.fn == "prod":
        return None
    return integer_identity(r.fn, x.dtype), integer_type(r.dtype if r.fn == "sum" else x.dtype)


class Reductions:
    # --- reductions --------------------------------------------------------------------------------
    def reduce_now(self, r: Node) -> None:
        """One-pass reduction of a whole row held in registers."""
        v = self.reduce_input(r)
        exact = integer_accumulator(r) if v.kind == "i" else None  # tl.sum keeps int32's width, which wraps
        if exact:
            neutral, code = exact[0], f"{v.code}.to({exact[1]})"
        elif r.fn == "sum" and v.kind == "b":  # a count
            neutral, code = "0", f"{v.code}.to(tl.int32)"
        else:
            neutral, code = NEUTRAL[r.fn], f(v)
        narrow = r.fn in ("max", "min") and v.code in self.raw  # a bf16 row held as loaded (Gen.narrow)
        code = self.raw[v.code] if narrow else code
        masked = f"tl.where(mask, {code}, {neutral})"
        out = self.fresh("r")
        ax = self.axis
        # a max or min over a NaN is NaN, and an argmax or argmin its first NaN's index, as PyTorch's; but a bf16
        # row held as loaded takes tl.max and tl.min, whose NaN is lost (the interpreter reduces bf16 only so;
        # where the max feeds an exp, as in cross-entropy and logsumexp, the NaN comes back through the sum), and
        # so does a softmax's max (Gen.stabilizers)
        plain = narrow or r in self.stabilizers
        if r.fn in ("argmax", "argmin"):
            expr = f"tl.reduce(({masked}, {self.reduced_index()}), {ax}, _{r.fn}_combine, keep_dims=True)[1]"
        elif plain and r.fn in ("max", "min"):
            expr = f"tl.{r.fn}({masked}, axis={ax}, keep_dims=True)"
        else:
            expr = reduced(r.fn, masked, ax)
        self.body.lines.append(f"{out} = {expr}" + (".to(tl.float32)" if narrow else ""))
        self.top.cache[r] = out
        self.kinds[r] = "f" if r.fn not in ("argmax", "argmin") and v.kind == "f" else "i"

    def reduced_index(self) -> str:
        """Each element's index into the reduced dims, over the whole tile."""
        return f"rr.to(tl.int32) + tl.zeros({self.tile('full')}, tl.int32)"

    def reduce_sums(self, rs: list[Node]) -> None:
        """The sums of one row held in registers: its float ones reduced together, as one tl.reduce of a tuple
        that exchanges them through shared memory at once (ptxas for sm_90, PolyNorm's three sums over 8192
        bf16: 8 barriers -> 2, the same registers); an integer one (a count) as reduce_now does."""
        floats = [r for r in rs if self.reduce_input(r).kind == "f"]
        floats = floats if len(floats) > 1 else []
        for r in rs:
            if r not in floats:
                self.reduce_now(r)
        for start in range(0, len(floats), 4):
            part = floats[start:start + 4]
            if len(part) == 1:
                self.reduce_now(part[0])
                continue
            masked = [f"tl.where(mask, {f(self.reduce_input(r))}, 0.0)" for r in part]
            outs = [self.fresh("r") for _ in part]
            self.body.lines.append(f"{', '.join(outs)} = tl.reduce(({', '.join(masked)}), {self.axis}, "
                                   f"_sum{len(part)}, keep_dims=True)")
            for r, out in zip(part, outs):
                self.top.cache[r] = out
                self.kinds[r] = "f"

    def reduce_start(self, r: Node) -> None:
        acc = self.fresh("acc")
        init, acc_type = integer_accumulator(r) or (NEUTRAL[r.fn], "tl.float32")
        self.top.lines.append(f"{acc} = tl.full({self.tile('full')}, {init}, {acc_type})")
        if r.fn in ("argmax", "argmin"):
            self.top.lines.append(f"{acc}_i = tl.zeros({self.tile('full')}, tl.int32)")
        self.top.cache[("acc", r)] = acc

    def reduce_step(self, r: Node) -> None:
        v = self.reduce_input(r)
        acc = self.top.cache[("acc", r)]
        exact = integer_accumulator(r)
        masked = (f"tl.where(mask, {v.code}.to({exact[1]}), {exact[0]})" if exact else
                  f"tl.where(mask, {f(v)}, {NEUTRAL[r.fn]})")
        lines = self.body.lines
        if r.fn == "sum":
            lines.append(f"{acc} += {masked}")
        elif r.fn == "prod":
            lines.append(f"{acc} *= {masked}")
        elif r.fn in ("max", "min"):
            lines.append(f"{acc} = tl.{'maximum' if r.fn == 'max' else 'minimum'}({acc}, {masked}, "
                         "propagate_nan=tl.PropagateNan.ALL)")
        else:  # a lane's first NaN, once seen, stays: the value is past the lane's best, or NaN where that is not,
            # as one unordered compare (setp.ltu for argmin: 371 -> 339 PTX instructions in level 1's 52, whose
            # NaN-keeping form ran 7% slower on an H200 than a plain compare's 275)
            beaten = "<=" if r.fn == "argmax" else ">="
            vv = self.fresh("vv")
            lines += [f"{vv} = {masked}", f"upd = ~({vv} {beaten} {acc}) & ({acc} == {acc})",
                      f"{acc}_i = tl.where(upd, {self.reduced_index()}, {acc}_i)",
                      f"{acc} = tl.where(upd, {vv}, {acc})"]

    def online_start(self, total: Node, peak: Node) -> None:
        """Running max and rescaled sum of exp(x - max), so one pass gives both (online softmax): per lane, or
        with online=2 one max per row, taken over each chunk (a cross-lane max per chunk, then two instructions
        fewer per element), or with online=3 one per group of adjacent elements of the row, 16 bytes of its
        dtype (a thread's vector load: the max takes no cross-lane step, the rescale one exp per group). The max
        starts finite so a lane or row that only sees masked (-inf) values rescales by exp(0), not NaN."""
        m, s = self.fresh("om"), self.fresh("os")
        online = self.p.get("online")
        m_tile = self.tile("red") if online == 2 else self._group_tile(peak) if online == 3 else self.tile("full")
        s_tile = self._group_tile(peak) if online == 3 else self.tile("full")
        self.top.lines += [f"{m} = tl.full({m_tile}, -3.0e38, tl.float32)",
                           f"{s} = tl.zeros({s_tile}, tl.float32)"]
        self.top.cache[("acc", peak)], self.top.cache[("acc", total)] = m, s

    def online_step(self, total: Node, peak: Node) -> None:
        v = self.reduce_input(peak)
        m, s = self.top.cache[("acc", peak)], self.top.cache[("acc", total)]
        vv = self.fresh("vv")
        self.body.lines.append(f"{vv} = tl.where(mask, {f(v)}, -float(\"inf\"))")
        nan = "" if peak in self.stabilizers else ", propagate_nan=tl.PropagateNan.ALL"  # a lane's NaN stays
        if self.p.get("online") == 2:
            new = self.fresh("mn")
            self.body.lines += [f"{new} = tl.maximum({m}, {self.peak_max(peak, vv, self.axis)}{nan})",
                                f"{s} = {s} * _exp({m} - {new}) + _exp({vv} - {new})", f"{m} = {new}"]
            return
        if self.p.get("online") == 3:
            new, g = self.fresh("mn"), self.fresh("og")
            self.body.lines += [f"{g} = tl.reshape({vv}, {self._group_tile(peak, 3)}, can_reorder=False)",
                                f"{new} = tl.maximum({m}, {self.peak_max(peak, g, 2, keep=False)}{nan})",
                                f"{s} = {s} * _exp({m} - {new}) + tl.sum(_exp({g} - {new}[:, :, None]), axis=2)",
                                f"{m} = {new}"]
            return
        # per lane, one exp per element: of exp(m - new) and exp(vv - new), one is exp(0) = 1, the other
        # exp(-|vv - m|)
        e = self.fresh("oe")
        self.body.lines += [f"{e} = _exp(-tl.abs({vv} - {m}))",
                            f"{s} = tl.where({vv} > {m}, {s} * {e} + 1.0, {s} + {e})",
                            f"{m} = tl.maximum({m}, {vv}{nan})"]

    def peak_max(self, peak: Node, x: str, axis, keep: bool = True) -> str:
        """The max of `x` along `axis` for an online pair's max: tl.max for a softmax's stabilizer, whose NaN comes
        through the sum anyway; NaN-keeping for one also compared (kernels.stabilizers)."""
        if peak not in self.stabilizers:
            return reduced("max", x, axis, keep)
        return f"tl.max({x}, axis={axis}{', keep_dims=True' if keep else ''})"

    def _group_tile(self, peak: Node, dims: int = 2) -> str:
        """online=3's tile of group maxima ([BLOCK_O, BLOCK_R // G]), or with dims=3 the row tile in groups."""
        assert self.layout == "row", "online=3 groups a row's adjacent elements"
        group = 16 // peak.dtype.itemsize
        return f"[BLOCK_O, BLOCK_R // {group}]" if dims == 2 else f"[BLOCK_O, BLOCK_R // {group}, {group}]"

    def online_end(self, total: Node, peak: Node) -> None:
        m, s = self.top.cache[("acc", peak)], self.top.cache[("acc", total)]
        rm, rs = self.fresh("r"), self.fresh("r")
        if self.p.get("online") == 2:
            self.top.lines.append(f"{rs} = tl.sum({s}, axis={self.axis}, keep_dims=True)")
            rm = m
        else:
            self.top.lines += [f"{rm} = {self.peak_max(peak, m, self.axis)}",
                               f"{rs} = tl.sum({s} * tl.exp({m} - {rm}), axis={self.axis}, keep_dims=True)"]
        self.top.cache[peak], self.top.cache[total] = rm, rs
        self.kinds[peak] = self.kinds[total] = "f"

    def welford_start(self, squares: Node, total: Node) -> None:
        if self.p.get("welford", 1) == 2:
            return self.lane_welford_start(squares, total)
        """Mean and variance in one pass: per-lane sums of x - p and (x - p)^2 around a pivot p, the mean of
        the row's first chunk, so the variance S2 - S1^2 / n suffers no cancellation when |mean| >> std.
        `self.chunk(start)` gives the lines that set rr and mask for a chunk (set by the kernel builder)."""
        outer, first = self.body, type(self.body)()
        self.body = first
        start = self.chunk_start  # the pivot's chunk sets its own start; the loop after it goes on from r0
        first.lines += self.chunk(self.first_chunk)
        v = self.reduce_input(total)
        pivot = self.fresh("wp")
        count = f"tl.maximum(tl.sum(tl.where(mask, 1.0, 0.0), axis={self.axis}, keep_dims=True), 1.0)"
        first.lines.append(f"{pivot} = tl.sum(tl.where(mask, {f(v)}, 0.0), axis={self.axis}, keep_dims=True) / {count}")
        self.body, self.chunk_start = outer, start
        self.top.lines += first.lines
        self.pivot_values.update(first.cache)
        n, s1, s2 = self.fresh("wn"), self.fresh("ws"), self.fresh("wq")
        self.top.lines += [f"{a} = tl.zeros({self.tile('full')}, tl.float32)" for a in (n, s1, s2)]
        self.top.cache[("acc", total)] = (pivot, n, s1, s2)

    def welford_step(self, squares: Node, total: Node) -> None:
        if self.p.get("welford", 1) == 2:
            return self.lane_welford_step(squares, total)
        v = self.reduce_input(total)
        pivot, n, s1, s2 = self.top.cache[("acc", total)]
        d = self.fresh("wd")
        self.body.lines += [f"{d} = tl.where(mask, {f(v)} - {pivot}, 0.0)", f"{n} += tl.where(mask, 1.0, 0.0)",
                            f"{s1} += {d}", f"{s2} += {d} * {d}"]

    def welford_end(self, squares: Node, total: Node) -> None:
        if self.p.get("welford", 1) == 2:
            return self.lane_welford_end(squares, total)
        pivot, n, s1, s2 = self.top.cache[("acc", total)]
        ax = self.axis
        count, t1, t2, avg, rs, rq = (self.fresh(x) for x in ("wc", "wt", "wu", "wa", "r", "r"))
        # a held split (COOP) keeps its chunk: one reduction of the three, or the deviations are kept for the
        # next one too (ptxas for sm_90 under the CPU's Triton 3.9: 160 registers a thread at 8192 elements over
        # 4 warps, 96 so)
        if self.p.get("COOP"):
            self.top.lines.append(f"{count}, {t1}, {t2} = tl.reduce(({n}, {s1}, {s2}), {ax}, _sum3, keep_dims=True)")
        else:
            self.top.lines += [f"{count} = tl.sum({n}, axis={ax}, keep_dims=True)",
                               f"{t1} = tl.sum({s1}, axis={ax}, keep_dims=True)",
                               f"{t2} = tl.sum({s2}, axis={ax}, keep_dims=True)"]
        self.top.lines += [f"{avg} = {pivot} + {t1} / tl.maximum({count}, 1.0)",
                           f"{rs} = {avg} * {count}",
                           f"{rq} = tl.maximum({t2} - {t1} * {t1} / tl.maximum({count}, 1.0), 0.0)"]
        self.top.cache[total], self.top.cache[squares] = rs, rq
        self.top.cache[("welford_parts", total)] = (count, avg, rq)
        self.kinds[total] = self.kinds[squares] = "f"

    def reduce_end(self, r: Node) -> None:
        acc, out, ax = self.top.cache[("acc", r)], self.fresh("r"), self.axis
        if r.fn in ("argmax", "argmin"):  # the best lanes, or those holding a NaN where the best is NaN
            first = f"tl.where(({acc} == {out}_v) | ({acc} != {acc}), {acc}_i, {INT32_MAX})"
            self.top.lines += [f"{out}_v = {reduced(r.fn[3:], acc, ax)}",
                               f"{out} = tl.min({first}, axis={ax}, keep_dims=True)"]
            self.kinds[r] = "i"
        else:
            self.top.lines.append(f"{out} = {reduced(r.fn, acc, ax)}")
            self.kinds[r] = "i" if integer_accumulator(r) else "f"
        self.top.cache[r] = out

    def lane_welford_start(self, squares: Node, total: Node) -> None:
        """welford=2: Welford's update per lane (count, mean, sum of squared deviations), lanes merged at
        the end with Chan's formula; exact, at the price of a division per element."""
        n, mean, m2 = self.fresh("wn"), self.fresh("wm"), self.fresh("w2")
        self.top.lines += [f"{v} = tl.zeros({self.tile('full')}, tl.float32)" for v in (n, mean, m2)]
        self.top.cache[("acc", total)] = (n, mean, m2)

    def lane_welford_step(self, squares: Node, total: Node) -> None:
        v = self.reduce_input(total)
        n, mean, m2 = self.top.cache[("acc", total)]
        delta = self.fresh("wd")
        self.body.lines += [f"{n} = {n} + tl.where(mask, 1.0, 0.0)", f"{delta} = {f(v)} - {mean}",
                            f"{mean} = {mean} + tl.where(mask, {delta} / tl.maximum({n}, 1.0), 0.0)",
                            f"{m2} = {m2} + tl.where(mask, {delta} * ({f(v)} - {mean}), 0.0)"]

    def lane_welford_end(self, squares: Node, total: Node) -> None:
        n, mean, m2 = self.top.cache[("acc", total)]
        count, avg, rs, rq = self.fresh("wc"), self.fresh("wa"), self.fresh("r"), self.fresh("r")
        self.top.lines += chan_merge((n, mean, m2), self.axis, (count, avg, rs, rq))
        self.top.cache[total], self.top.cache[squares] = rs, rq
        self.top.cache[("welford_parts", total)] = (count, avg, rq)
        self.kinds[total] = self.kinds[squares] = "f"


def shifted_merge(states: tuple[str, str, str], shift: str, out: tuple[str, str, str, str]) -> list[str]:
    """chan_merge of a vector of states into scalars in one reduction: each mean taken from `shift` (a value near
    the row's mean, one of the states' means), so its squared deviations need not wait for the row's mean. The
    row's last program of a held split combines this way while the row's other programs wait (kernels._held).
    On an H200 (session 15), level 1's 35_GroupNorm_ (256 partials a row): 5.28 ms with chan_merge's three
    reductions (over a vector, into scalars), two in turn, 5.21 so (two calls)."""
    (n, mean, m2), (count, avg, total, squares) = states, out
    dev, sq = f"{n} * ({mean} - {shift})", f"{m2} + {n} * ({mean} - {shift}) * ({mean} - {shift})"
    d, q = f"{avg}_d", f"{avg}_q"
    return [f"{count}, {d}, {q} = tl.reduce(({n}, {dev}, {sq}), 0, _sum3)",
            f"{avg} = {shift} + {d} / tl.maximum({count}, 1.0)",
            f"{total} = {avg} * {count}",
            f"{squares} = tl.maximum({q} - {d} * {d} / tl.maximum({count}, 1.0), 0.0)"]


def chan_merge(states: tuple[str, str, str], axis: int, out: tuple[str, str, str, str]) -> list[str]:
    """Lines merging Welford states (count, mean, sum of squared deviations) along `axis` with Chan's
    formula into the row's count, mean, sum and sum of squared deviations (the names in `out`)."""
    (n, mean, m2), (count, avg, total, squares) = states, out
    return [f"{count} = tl.sum({n}, axis={axis}, keep_dims=True)",
            f"{avg} = tl.sum({n} * {mean}, axis={axis}, keep_dims=True) / tl.maximum({count}, 1.0)",
            f"{total} = {avg} * {count}",
            f"{squares} = tl.sum({m2} + {n} * ({mean} - {avg}) * ({mean} - {avg}), axis={axis}, keep_dims=True)"]
