"""Trace-time decompositions of high-level ATen ops into the reductions and pointwise ops the template
code generator knows. Each returns what the ATen op returns; unused extra outputs are dead-code eliminated.
Passed to make_fx as its decomposition_table (see agent/analysis.trace)."""
from __future__ import annotations

import math

import torch
import torch._decomp

aten = torch.ops.aten


def _dims(x, dims) -> list[int]:
    """The dims a reduction takes: all of them where none are given, and none of a 0-dim x (its dim 0 or -1)."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0) or x.dim() == 0:
        return list(range(x.dim()))
    return [d % max(x.dim(), 1) for d in ([dims] if isinstance(dims, int) else dims)]


def _count(x, dims) -> int:
    return math.prod(x.shape[d] for d in dims)


def softmax(x, dim, half_to_float=False):
    m = torch.amax(x, [dim], True)
    e = torch.exp(x - m)
    return e / torch.sum(e, [dim], True)


def log_softmax(x, dim, half_to_float=False):
    m = torch.amax(x, [dim], True)
    shifted = x - m
    return shifted - torch.log(torch.sum(torch.exp(shifted), [dim], True))


def safe_softmax(x, dim, dtype=None):
    """Softmax whose rows of -inf (every key masked) are 0 rather than NaN."""
    out = softmax(x, dim)
    return torch.where(torch.amax(x, [dim], True) == -math.inf, 0.0, out)


def logsumexp(x, dims, keepdim=False):
    dims = _dims(x, dims)
    if any(x.shape[d] == 0 for d in dims):  # the log of an empty sum, as PyTorch's (amax has no identity to give)
        out = torch.full([1 if d in dims else n for d, n in enumerate(x.shape)], -math.inf, dtype=x.dtype,
                         device=x.device)
        return out if keepdim else torch.squeeze(out, dims)
    m = torch.amax(x, dims, True)
    out = torch.log(torch.sum(torch.exp(x - m), dims, True)) + m
    out = torch.where(torch.abs(m) == math.inf, m, out)  # a row of -inf is -inf, one with +inf +inf (x - m was NaN)
    return out if keepdim else torch.squeeze(out, dims)


def _moments(x, dims, correction=0):
    n = _count(x, dims)
    mean = torch.sum(x, dims, True) * (1.0 / n)
    centered = x - mean
    # PyTorch divides by max(n - correction, 0): by 0 where that is not positive, inf for a spread, NaN for none
    var = torch.sum(centered * centered, dims, True) * (1.0 / (n - correction) if n > correction else math.inf)
    return mean, centered, var


def var(x, dims=None, *, correction=None, keepdim=False):
    dims = _dims(x, dims)
    _, _, v = _moments(x, dims, 1 if correction is None else correction)
    return v if keepdim else torch.squeeze(v, dims)


def std(x, dims=None, *, correction=None, keepdim=False):
    return torch.sqrt(var(x, dims, correction=correction, keepdim=keepdim))


def lcm(a, b):
    """PyTorch's: |a / gcd(a, b) * b|, and 0 where both are 0."""
    g = torch.gcd(a, b)
    return torch.abs(torch.div(a, torch.where(g == 0, 1, g), rounding_mode="trunc") * b)


def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """torch's decomposition (a comparison of two iotas) where the offset or the dims are not the defaults; those
    lower as they are."""
    if (offset, dim1 % (x.dim() + 1), dim2 % (x.dim() + 1)) == (0, x.dim() - 1, x.dim()):
        return NotImplemented
    return torch._refs.diag_embed(x, offset, dim1, dim2)


def addbmm(x, b1, b2, *, beta=1, alpha=1):
    """beta x + alpha (the sum of b1[i] @ b2[i]): one product, the batch folded into the inner dim."""
    n, p = b1.shape[1], b2.shape[2]
    out = torch.mm(b1.permute(1, 0, 2).reshape(n, -1), b2.reshape(-1, p))
    out = out if alpha == 1 else out * alpha
    return out if beta == 0 else out + (x if beta == 1 else x * beta)  # beta 0: x unread, its NaNs too


def put(x, index, source, accumulate=False):
    """x with source's elements stored at (added to) the flat positions index names."""
    return torch.index_put(x.reshape(-1), [index.reshape(-1)], source.reshape(-1), accumulate).view(x.shape)


def put_(x, index, source, accumulate=False):
    return x.copy_(put(x, index, source, accumulate))


def masked_scatter(x, mask, source):
    """x with its places under mask (broadcast) filled in turn, row-major, from source's elements: each masked
    place takes the source element its count of masked places before it names."""
    x, mask = torch.broadcast_tensors(x, mask)
    before = torch.cumsum(mask.reshape(-1).to(torch.int64), 0) - 1
    taken = torch.gather(source.reshape(-1), 0, torch.clamp(before, min=0))
    return torch.where(mask, taken.view(mask.shape), x)


def _window(n, periodic, dtype, device, shape):
    """A window of n as `shape` gives it at positions 0..n-1 over its span (n periodic, else n - 1), as
    torch.*_window computes it; one element is 1."""
    if n <= 1:
        return torch.ones(n, dtype=dtype or torch.get_default_dtype(), device=device)
    at = torch.arange(n, dtype=torch.float64 if dtype == torch.float64 else torch.float32, device=device)
    return shape(at, n if periodic else n - 1).to(dtype or torch.get_default_dtype())


def hamming_window(n, periodic=True, alpha=0.54, beta=0.46, *, dtype=None, layout=None, device=None,
                   pin_memory=None):
    return _window(n, periodic, dtype, device, lambda i, span: alpha - beta * torch.cos(i * (2 * math.pi / span)))


def hann_window(n, periodic=True, *, dtype=None, layout=None, device=None, pin_memory=None):
    return hamming_window(n, periodic, 0.5, 0.5, dtype=dtype, device=device)


def blackman_window(n, periodic=True, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _window(n, periodic, dtype, device, lambda i, span: 0.42 - 0.5 * torch.cos(i * (2 * math.pi / span)) +
                   0.08 * torch.cos(i * (4 * math.pi / span)))


def bartlett_window(n, periodic=True, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _window(n, periodic, dtype, device, lambda i, span: 1 - torch.abs(i * (2 / span) - 1))


def kaiser_window(n, periodic=True, beta=12.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _window(n, periodic, dtype, device, lambda i, span: torch.special.i0(
        beta * torch.sqrt(torch.clamp(1 - (i * (2 / span) - 1) ** 2, min=0))) / torch.special.i0(
        torch.tensor(beta, dtype=i.dtype, device=i.device)))


def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    """index_reduce by mean, amax or amin as scatters of the source along `dim` (a product is not built): a
    mean as a sum over a count, and without the target's own values (include_self False) a reduction from the
    identity, kept where some source element lands."""
    if reduce not in ("mean", "amax", "amin") or not x.dtype.is_floating_point:
        return NotImplemented
    dim = dim % max(x.dim(), 1)
    index = index.view([-1 if d == dim else 1 for d in range(source.dim())]).expand(source.shape)
    return _reduce_into(x, dim, index, source, reduce, include_self)


def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    """scatter_reduce over floats by mean, or by sum, amax or amin without the target's own values, as
    index_reduce's scatters (the others lower as they are; a product is not built)."""
    built = reduce == "mean" or reduce in ("sum", "amax", "amin") and not include_self
    if not built or not x.dtype.is_floating_point:
        return NotImplemented
    source = src[tuple(slice(0, n) for n in index.shape)]  # the source's elements at the index's positions
    return _reduce_into(x, dim % max(x.dim(), 1), index, source, reduce, include_self)


def _reduce_into(x, dim, index, source, reduce, include_self):
    """x with `source` reduced into it along `dim` at `index` (the source's shape), by sum, mean, amax or amin: a
    reduction without the target's own values (include_self False) kept where some source element lands."""
    count = torch.zeros_like(x).scatter_add(dim, index, torch.ones_like(source))
    if reduce in ("sum", "mean"):
        total = torch.zeros_like(x).scatter_add(dim, index, source)
        if include_self:
            total, count = total + x, count + 1
        return torch.where(count == 0, x, total / count if reduce == "mean" else total)
    if include_self:
        return x.scatter_reduce(dim, index, source, reduce)
    start = torch.full_like(x, -math.inf if reduce == "amax" else math.inf)
    return torch.where(count == 0, x, start.scatter_reduce(dim, index, source, reduce))


def frexp(x):
    """float32 mantissas in [0.5, 1) and exponents from the bits; a subnormal scaled by 2**24 first. Zero, an
    infinity and NaN are their own mantissa, with exponent 0, as C's frexp."""
    if x.dtype != torch.float32:
        return NotImplemented
    tiny = torch.abs(x) < 2.0 ** -126
    bits = torch.where(tiny, x * 2.0 ** 24, x).view(torch.int32)
    exponent = ((bits >> 23) & 0xFF) - torch.where(tiny, 150, 126)
    mantissa = ((bits & -0x7F800001) | 0x3F000000).view(torch.float32)  # the exponent field set to 126
    special = (x == 0) | ~torch.isfinite(x)
    return torch.where(special, x, mantissa), torch.where(special, 0, exponent).to(torch.int32)


def nextafter(x, y):
    """The float32 next to x towards y: x's bits stepped by one (towards zero where that is towards y); from
    zero the smallest subnormal with y's sign; y where they are equal, NaN where either is."""
    if x.dtype != torch.float32:
        return NotImplemented
    bits = x.view(torch.int32)
    stepped = torch.where((y > x) == (x > 0), bits + 1, bits - 1).view(torch.float32)
    smallest = torch.where(y > 0, 1, -0x7FFFFFFF).to(torch.int32).view(torch.float32)  # 0x00000001, 0x80000001
    out = torch.where(x == y, y, torch.where(x == 0, smallest, stepped))
    return torch.where(torch.isnan(x) | torch.isnan(y), x + y, out)


def var_mean(x, dims=None, *, correction=None, keepdim=False):
    dims = _dims(x, dims)
    mean, _, v = _moments(x, dims, 1 if correction is None else correction)
    if not keepdim:
        mean, v = torch.squeeze(mean, dims), torch.squeeze(v, dims)
    return v, mean


def std_mean(x, dims=None, *, correction=None, keepdim=False):
    v, mean = var_mean(x, dims, correction=correction, keepdim=keepdim)
    return torch.sqrt(v), mean


def mv(a, v):
    return torch.sum(a * v, [1])


def trace(x):
    return torch.sum(torch.diagonal(x))


def cdist(x1, x2, p, compute_mode=None):
    """Each pair's p-norm distance from the pair's differences, every one formed in the kernel that sums them."""
    d = torch.abs(x1.unsqueeze(-2) - x2.unsqueeze(-3))
    if p == 2:
        return torch.sqrt(torch.sum(d * d, [-1]))
    if p == 1:
        return torch.sum(d, [-1])
    if p == math.inf:
        return torch.amax(d, [-1])
    if p == 0:
        return torch.sum((d != 0).to(x1.dtype), [-1])
    return torch.pow(torch.sum(torch.pow(d, p), [-1]), 1.0 / p)


def trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """nn.Bilinear's product: the three tensors each unsqueezed at their expand dims to one rank, multiplied and
    summed over `sumdim`, each product formed in the kernel that sums it."""
    def widened(t, dims):
        for d in sorted(dims):
            t = t.unsqueeze(d)
        return t
    out = widened(i1, expand1) * widened(i2, expand2) * widened(i3, expand3)
    return torch.sum(out, list(sumdim)) if sumdim else out


def dot(a, b):
    return torch.sum(a * b)


def rot90(x, k=1, dims=(0, 1)):
    k, (d0, d1) = k % 4, dims
    if k == 1:
        return torch.transpose(torch.flip(x, [d1]), d0, d1)
    if k == 2:
        return torch.flip(x, [d0, d1])
    return torch.flip(torch.transpose(x, d0, d1), [d1]) if k == 3 else x


TOPK_MOST = 16  # the largest k taken as k reductions over the row (a router's experts, not a sampler's vocabulary)
SORT_MOST = 4096  # the longest row a sort holds in one block (ir.sort); a larger k sorts such a row


def topk(x, k, dim=-1, largest=True, sorted=True):
    """The k largest (smallest) along `dim` as k rounds of a max and its first index, each round's element then
    left out: torch.topk's values in order; its indices too where no two values tie (its choice among ties is
    its own). Unsorted (sorted=False), in this order too: PyTorch leaves that order unspecified, so a kernel may
    pick any, and a task whose output depends on it is still judged against PyTorch's own. A row with fewer than k
    values above -inf (or, for the smallest, fewer than k that are not NaN) takes the rest by first index, none
    twice."""
    dim = dim % max(x.dim(), 1)
    if k > TOPK_MOST and x.shape[dim] <= SORT_MOST:  # the row sorted, stably: ties in index order, as above
        values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
        return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)
    if k > TOPK_MOST:
        raise NotImplementedError(f"a top-k is built for k of at most {TOPK_MOST}, or over rows of at most "
                                  f"{SORT_MOST}; this one has k {k} over {x.shape[dim]}")
    along = [-1] + [1] * (x.dim() - dim - 1)  # a vector laid along dim
    at = torch.arange(x.shape[dim], device=x.device).view(along)
    left = x if largest else torch.where(torch.isnan(x), -math.inf, -x)  # NaN ranks last among the smallest
    values, indices, free = [], [], None
    for _ in range(k):
        top = torch.amax(left, [dim], True)
        i = torch.argmax(left, dim, True)
        if free is not None:  # a round whose best is -inf: the first element not yet taken (a taken one is -inf too)
            i = torch.where(top == -math.inf, torch.argmax(free, dim, True), i)
        values.append(top)
        indices.append(i)
        hit = at == i
        left = torch.where(hit, -math.inf, left)
        free = torch.where(hit, 0.0, 1.0 if free is None else free)
    out = torch.cat(values, dim)
    if not largest:  # a row's NaNs are its last values, the places past its other values
        rank = torch.arange(k, device=x.device).view(along)
        out = torch.where(rank >= x.shape[dim] - torch.isnan(x).sum(dim, keepdim=True), math.nan, -out)
    return out, torch.cat(indices, dim)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    dims = _dims(x, dim)
    if ord == 2:
        out = torch.sqrt(torch.sum(x * x, dims, True))
    elif ord == 1:
        out = torch.sum(torch.abs(x), dims, True)
    elif ord == float("inf"):
        out = torch.amax(torch.abs(x), dims, True)
    elif ord == -float("inf"):
        out = torch.amin(torch.abs(x), dims, True)
    elif ord == 0:  # the count of nonzero elements
        out = torch.sum((x != 0).to(x.dtype), dims, True)
    else:
        out = torch.pow(torch.sum(torch.pow(torch.abs(x), ord), dims, True), 1.0 / ord)
    return out if keepdim else torch.squeeze(out, dims)


def layer_norm(x, normalized_shape, weight, bias, eps):
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    mean, centered, v = _moments(x, dims)
    rstd = torch.rsqrt(v + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def group_norm(x, weight, bias, n, c, hw, group, eps):
    xg = x.view(n, group, -1)
    mean, centered, v = _moments(xg, [2])
    rstd = torch.rsqrt(v + eps)
    out = (centered * rstd).view(x.shape)
    channel = [1, c] + [1] * (x.dim() - 2)
    if weight is not None:
        out = out * weight.view(channel)
    if bias is not None:
        out = out + bias.view(channel)
    return out, mean.view(n, group), rstd.view(n, group)


def _batch_norm(x, weight, bias, running_mean, running_var, training, eps):
    channel = [1, x.shape[1]] + [1] * (x.dim() - 2)
    if training or running_mean is None:
        dims = [0] + list(range(2, x.dim()))
        mean, centered, v = _moments(x, dims)
        rstd = torch.rsqrt(v + eps)
        out = centered * rstd
        mean, rstd = mean.view(-1), rstd.view(-1)
    else:
        rstd = torch.rsqrt(running_var + eps)
        out = (x - running_mean.view(channel)) * rstd.view(channel)
        mean = running_mean
    if weight is not None:
        out = out * weight.view(channel)
    if bias is not None:
        out = out + bias.view(channel)
    return out, mean, rstd


def batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _batch_norm(x, weight, bias, running_mean, running_var, training, eps)


def batch_norm_legit(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _batch_norm(x, weight, bias, running_mean, running_var, training, eps)


def batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    return _batch_norm(x, weight, bias, running_mean, running_var, False, eps)


def batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    return _batch_norm(x, weight, bias, None, None, True, eps)


def _reduce(loss, reduction):
    if reduction == 1:
        return torch.mean(loss)
    if reduction == 2:
        return torch.sum(loss)
    return loss


def mse_loss(a, b, reduction=1):
    d = a - b
    return _reduce(d * d, reduction)


def l1_loss(a, b, reduction=1):
    return _reduce(torch.abs(a - b), reduction)


def huber_loss(a, b, reduction=1, delta=1.0):
    d = torch.abs(a - b)
    return _reduce(torch.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def smooth_l1_loss(a, b, reduction=1, beta=1.0):
    d = torch.abs(a - b)
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(torch.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def nll_loss_forward(logp, target, weight, reduction, ignore_index):
    """Classes along dim 1 of logp (dim 0 of a single sample's), any dims after them (nll_loss2d's too); each
    target's class weight read where it is not ignored."""
    at = 0 if logp.dim() == 1 else 1
    classes = torch.arange(logp.shape[at], device=logp.device).view([-1] + [1] * (logp.dim() - at - 1))
    picked = torch.sum(torch.where(classes == target.unsqueeze(at), logp, 0.0), [at])
    valid = target != ignore_index
    if weight is None:
        weights = valid.to(logp.dtype)  # PyTorch's total weight has the input's dtype
    else:
        weights = torch.where(valid, weight[torch.where(valid, target, 0)], 0.0).to(logp.dtype)
    loss = -picked * weights
    total = torch.sum(weights)
    if reduction == 1:
        return torch.sum(loss) / total, total
    if reduction == 2:
        return torch.sum(loss), total
    return loss, total


def multilabel_margin_loss_forward(x, target, reduction):
    """Each row's hinge 1 - (x[t] - x[i]) over its targets t (the labels before its first -1) and its other
    classes i, summed, over the classes; and which classes are targets. (torch's own decomposition sums over
    the labels past the -1 too.)"""
    row = x.dim() == 1
    x, target = (x[None], target[None]) if row else (x, target)
    classes = torch.arange(x.shape[-1])
    end = torch.amin(torch.where(target == -1, classes, x.shape[-1]), dim=-1, keepdim=True)
    listed = classes < end  # [rows, positions]: the position holds a label
    label = torch.where(listed, target, 0)
    is_target = torch.any(listed[:, :, None] & (label[:, :, None] == classes), dim=1)  # [rows, classes]
    hinge = torch.clamp(1.0 - torch.gather(x, 1, label)[:, :, None] + x[:, None, :], min=0.0)
    pairs = listed[:, :, None] & ~is_target[:, None, :]
    loss = torch.where(pairs, hinge, 0.0).sum((1, 2)) / x.shape[-1]
    loss = loss[0] if row and reduction == 0 else loss
    return _reduce(loss, reduction), is_target.to(x.dtype).reshape(target.shape if not row else target.shape[1:])


def binary_cross_entropy(x, y, weight=None, reduction=1):
    loss = -(y * torch.clamp(torch.log(x), min=-100) + (1 - y) * torch.clamp(torch.log(1 - x), min=-100))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def roll(x, shifts, dims=()):
    """Each rolled dim as the concatenation of its last `shift` entries and the rest (no dims: the flattened
    tensor, rolled, reshaped back)."""
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    if not dims:
        return roll(x.reshape(-1), shifts, [0]).reshape(x.shape)
    out = x
    for shift, d in zip(shifts, [dims] if isinstance(dims, int) else list(dims)):
        size = out.shape[d]
        shift %= size
        if shift:
            out = torch.cat([torch.narrow(out, d, size - shift, shift), torch.narrow(out, d, 0, size - shift)], d)
    return out


def pad_circular(x, pad):
    """Each padded dim as the concatenation of its last `before` entries, itself and its first `after` (pad lists
    the last dim's pair first, as F.pad does)."""
    if any(p < 0 for p in pad):
        raise NotImplementedError("circular padding by a negative amount (a crop) is not built")
    out = x
    for i in range(len(pad) // 2):
        d, before, after = x.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]
        size = out.shape[d]
        pieces = [torch.narrow(out, d, size - before, before)] if before else []
        pieces += [out] + ([torch.narrow(out, d, 0, after)] if after else [])
        out = torch.cat(pieces, d) if len(pieces) > 1 else out
    return out


def rrelu_with_noise(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """In eval mode a leaky ReLU whose slope is the mean of the bounds; in training its slopes are random, and the
    op is left as it is (ir.RANDOM refuses it)."""
    if training:
        return NotImplemented
    return torch.where(x >= 0, x, x * ((lower + upper) / 2))


def median_dim(x, dim=-1, keepdim=False):
    """The lower middle of a sort along dim; where the row holds NaN, its first NaN (sorted last, in order),
    as PyTorch's median gives."""
    d = dim % max(x.dim(), 1)
    v, i = torch.sort(x, d)
    nans = torch.isnan(x).sum(d, keepdim=True)
    at = torch.where(nans > 0, x.shape[d] - nans, (x.shape[d] - 1) // 2)
    v, i = torch.gather(v, d, at), torch.gather(i, d, at)
    return (v, i) if keepdim else (v.squeeze(d), i.squeeze(d))


def median_all(x):
    return median_dim(x.reshape(-1))[0]


def nanmedian_dim(x, dim=-1, keepdim=False):
    """The lower middle of a row's values other than NaN (sorted last), NaN where the row has no other."""
    d = dim % max(x.dim(), 1)
    v, i = torch.sort(x, d)
    count = (~torch.isnan(x)).sum(d, keepdim=True)
    at = torch.clamp((count - 1) // 2, min=0)
    v, i = torch.gather(v, d, at), torch.gather(i, d, at)
    return (v, i) if keepdim else (v.squeeze(d), i.squeeze(d))


def nanmedian_all(x):
    return nanmedian_dim(x.reshape(-1))[0]


def kthvalue(x, k, dim=-1, keepdim=False):
    """The k-th smallest along dim (from 1), NaNs sorted last, and its index."""
    d = dim % max(x.dim(), 1)
    v, i = torch.sort(x, d)
    v, i = torch.narrow(v, d, k - 1, 1), torch.narrow(i, d, k - 1, 1)
    return (v, i) if keepdim else (v.squeeze(d), i.squeeze(d))


def pdist_forward(x, p=2.0):
    """The p-norm distance of each pair of rows i < j, pairs in row-major order: pair t's row i from the root of
    the quadratic its rows' first pairs (i (2n - i - 1) / 2) solve, in float32 and then moved by one either way
    to where those first pairs say in integers; j from t's place after row i's first pair."""
    n = x.shape[0]
    t = torch.arange(n * (n - 1) // 2)

    def first(i):  # row i's first pair
        return i * (2 * n - i - 1) // 2

    root = ((2 * n - 1) - torch.sqrt(((2 * n - 1) ** 2 - 8 * t).to(torch.float32))) / 2
    i = torch.clamp(torch.floor(root).to(torch.int64), 0, max(n - 2, 0))
    i = torch.where(first(i + 1) <= t, i + 1, i)
    i = torch.where(first(i) > t, i - 1, i)
    j = t - first(i) + i + 1
    return torch.linalg.vector_norm(x.index_select(0, i) - x.index_select(0, j), p, dim=-1)


def _aa_filter(x, cubic: bool):
    """The antialiased resampling filters: a triangle, or the cubic convolution kernel with a = -0.5."""
    x = torch.abs(x)
    if not cubic:
        return torch.clamp(1.0 - x, min=0.0)
    a = -0.5
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return torch.where(x < 1.0, near, torch.where(x < 2.0, far, 0.0))


def _aa_taps(size_in: int, size_out: int, scale_factor, cubic: bool):
    """Each output's window, as PyTorch's antialiased resize takes it (a filter widened by the scale where it
    shrinks, over the inputs whose centers fall within its support, truncated to the image): its first input
    [size_out], its normalized weights [size_out, taps] and which taps are in it [size_out, taps] (a tap past
    the window weighs 0)."""
    scale = 1.0 / scale_factor if scale_factor else size_in / size_out
    support = (2.0 if cubic else 1.0) * max(scale, 1.0)
    taps = int(math.ceil(support)) * 2 + 1
    center = scale * (torch.arange(size_out, dtype=torch.float32) + 0.5)
    lo = torch.clamp(torch.trunc(center - support + 0.5), min=0.0)
    hi = torch.clamp(torch.trunc(center + support + 0.5), max=float(size_in))
    at = lo[:, None] + torch.arange(taps, dtype=torch.float32)
    inside = at < hi[:, None]
    w = torch.where(inside, _aa_filter((at - center[:, None] + 0.5) / max(scale, 1.0), cubic), 0.0)
    total = w.sum(1, keepdim=True)
    return lo.to(torch.int64), w / torch.where(total != 0.0, total, 1.0), inside


def upsample_aa(cubic: bool):
    def resize(x, output_size, align_corners, scales_h=None, scales_w=None):
        if align_corners:  # not decomposed: the op stays, and no template lowers it
            return NotImplemented
        for dim, size, scale in ((-1, output_size[1], scales_w), (-2, output_size[0], scales_h)):
            lo, w, inside = _aa_taps(x.shape[dim], size, scale, cubic)
            at = torch.clamp(lo[:, None] + torch.arange(w.shape[1]), max=x.shape[dim] - 1)
            window = x.index_select(dim, at.flatten()).unflatten(dim, tuple(at.shape))  # [..., size, taps(, W)]
            weight, inside = (w.to(x.dtype), inside) if dim == -1 else (w.to(x.dtype)[:, :, None], inside[:, :, None])
            x = torch.where(inside, window * weight, 0.0).sum(dim)  # a tap past the window adds 0, not 0 * inf
        return x
    return resize


def _linear_taps(size_in: int, size_out: int, align_corners: bool, scale, device):
    """Each output's two inputs along one dim and the second's weight, as PyTorch's linear resampling takes them:
    the source coordinate in float32, clamped at 0 (half a pixel in, unless align_corners), its floor and the
    next input (the last one at the image's end)."""
    i = torch.arange(size_out, device=device).to(torch.float32)
    if align_corners:
        src = i * ((size_in - 1) / (size_out - 1) if size_out > 1 else 0.0)
    else:
        step = 1.0 / scale if scale is not None and scale > 0 else size_in / size_out
        src = (step * (i + 0.5) - 0.5).clamp(min=0.0)
    lo = src.to(torch.int64)
    return lo, (lo + 1).clamp(max=size_in - 1), (src - lo).clamp(0.0, 1.0)


def upsample_linear(x, output_size, align_corners, *scales):
    """Linear, bilinear and trilinear resampling as PyTorch's kernels weigh it, the last dim first: a * (1 - t) +
    b * t, in float32. torch's own decomposition takes a + (b - a) * t, which makes two -inf neighbours NaN where
    PyTorch's kernels give -inf (a ReLU after it gives 0)."""
    dtype, spatial = x.dtype, x.dim() - 2
    scales = (list(scales) + [None] * spatial)[:spatial]
    y = x.to(torch.float32)
    for d in reversed(range(spatial)):
        lo, hi, t = _linear_taps(x.shape[2 + d], output_size[d], align_corners, scales[d], x.device)
        t = t.view([-1] + [1] * (spatial - 1 - d))
        y = y.index_select(2 + d, lo) * (1.0 - t) + y.index_select(2 + d, hi) * t
    return y.to(dtype) if dtype.is_floating_point else torch.round(y).to(dtype)


def upsample_linear_vec(x, output_size, align_corners, scale_factors):
    if output_size is None:
        output_size = [int(n * f) for n, f in zip(x.shape[2:], scale_factors)]
    return upsample_linear(x, output_size, align_corners, *(scale_factors or []))


def _search(values, seq, right: bool, out_int32: bool):
    """PyTorch's binary search for each value in the sorted sequence (seq's last dim; a 1-D seq for every
    value), unrolled over its bit length: a step moves right where the middle is below the value (at or below,
    `right`, and past a NaN, as PyTorch's `!(mid >= value)` does), so an unsorted sequence, as the evaluator's
    changed inputs may make it, gives PyTorch's answer too."""
    n = seq.shape[-1]
    lo = torch.zeros(values.shape, dtype=torch.int64)
    hi = torch.full(values.shape, n, dtype=torch.int64)
    for _ in range(n.bit_length()):
        mid = torch.div(lo + hi, 2, rounding_mode="floor")
        at = mid.clamp(max=n - 1)
        middle = seq[at] if seq.dim() == 1 else torch.gather(seq, -1, at)
        live = lo < hi
        right_of = live & ~(middle > values if right else middle >= values)
        lo = torch.where(right_of, mid + 1, lo)
        hi = torch.where(live & ~right_of, mid, hi)
    return lo.to(torch.int32 if out_int32 else torch.int64)


def _triangle_indices(upper: bool):
    """torch.triu_indices / tril_indices: each row's first column and count in the triangle, their running
    ends, and for each element (row-major, as PyTorch orders them) its row by a search of those ends and its
    column from its place in the row."""
    def indices(row, col, offset=0, *, dtype=torch.long, layout=None, device=None, pin_memory=False):
        r = torch.arange(row, device=device)
        first = torch.clamp(r + offset, min=0) if upper else torch.zeros_like(r)
        count = torch.clamp(col - first if upper else torch.clamp(r + offset + 1, max=col), min=0)
        total = sum(max(0, col - max(i + offset, 0)) if upper else max(0, min(i + offset + 1, col))
                    for i in range(row))
        ends = torch.cumsum(count, 0)
        t = torch.arange(total, device=device)
        rows = _search(t, ends, True, False)
        return torch.stack([rows, t - (ends - count)[rows] + first[rows]]).to(dtype)
    return indices


def bucketize(x, boundaries, *, out_int32=False, right=False):
    return _search(x, boundaries, right, out_int32)


def searchsorted(seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:
        seq = torch.gather(seq, -1, sorter)
    return _search(values, seq, right or side == "right", out_int32)


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Sums (mode 0), means (mode 1) or maxima (mode 2) of bags of weight's rows: each index's bag is the count of
    offsets at or below its position, less one; its row, weighted, is added (or maxed) into that bag, an empty
    bag 0. (output, offset2bag, bag_size, max_indices), the last three only as PyTorch shapes them: no lowering
    reads them but the output."""
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    bag = _search(torch.arange(indices.shape[0], device=indices.device), offsets, True, False) - 1
    rows = weight[indices]
    kept = (indices != padding_idx).to(weight.dtype) if padding_idx >= 0 else torch.ones_like(bag, dtype=weight.dtype)
    if mode == 2:
        rows = torch.where(kept[:, None] > 0, rows, -float("inf"))
        top = weight.new_full((bags, weight.shape[1]), -float("inf")).scatter_reduce(
            0, bag[:, None].expand(-1, weight.shape[1]), rows, "amax")
        filled = weight.new_zeros((bags,)).index_add(0, bag, kept) > 0
        return torch.where(filled[:, None], top, 0.0), bag, torch.zeros_like(offsets), torch.zeros_like(offsets)
    weights = kept if per_sample_weights is None else kept * per_sample_weights
    out = weight.new_zeros((bags, weight.shape[1])).index_add(0, bag, rows * weights[:, None])
    if mode == 1:
        out = out / weight.new_zeros((bags,)).index_add(0, bag, kept).clamp_min(1.0)[:, None]
    return out, bag, torch.zeros_like(offsets), torch.zeros_like(offsets)


def histc(x, bins=100, min=0, max=0):
    """Counts of x's elements in `bins` equal bins over [min, max] (over the data's range where both are 0, widened
    by 1 each way where that is one value): each element's bin (x - min) bins / (max - min), the top edge in the
    last bin, atomically added to (index_add); elements outside the range add zero."""
    dtype, x = x.dtype, x.flatten().float()  # bins found in float32, as the math finds them
    lo, hi = (x.min(), x.max()) if min == max else (x.new_tensor(float(min)), x.new_tensor(float(max)))
    if min == max:
        lo, hi = torch.where(lo == hi, lo - 1, lo), torch.where(lo == hi, hi + 1, hi)
    inside = (x >= lo) & (x <= hi)
    at = ((x - lo) * bins / (hi - lo)).to(torch.int64).clamp(0, bins - 1)
    return x.new_zeros((bins,)).index_add(0, at, inside.to(x.dtype)).to(dtype)


def max_unpool(x, indices, output_size, stride=None, padding=None):
    """Each value stored at its index in a zero plane of output_size (a max pool's indices, per plane; the 3-D
    form's stride and padding are implied by them)."""
    n, c = x.shape[:2]
    out = x.new_zeros((n, c, math.prod(output_size)))
    return out.scatter(2, indices.flatten(2), x.flatten(2)).view(n, c, *output_size)


DECOMPOSITIONS = {
    aten.histc.default: histc,
    aten._embedding_bag.default: embedding_bag,
    aten._embedding_bag_forward_only.default: embedding_bag,
    aten.max_unpool2d.default: max_unpool,
    aten.max_unpool3d.default: max_unpool,
    aten.bucketize.Tensor: bucketize,
    aten.searchsorted.Tensor: searchsorted,
    aten.median.dim: median_dim,
    aten.median.default: median_all,
    aten.nanmedian.dim: nanmedian_dim,
    aten.nanmedian.default: nanmedian_all,
    aten.kthvalue.default: kthvalue,
    aten._pdist_forward.default: pdist_forward,
    aten._upsample_bilinear2d_aa.default: upsample_aa(cubic=False),
    aten._upsample_bicubic2d_aa.default: upsample_aa(cubic=True),
    aten._pad_circular.default: pad_circular,
    aten.rrelu_with_noise.default: rrelu_with_noise,
    aten._softmax.default: softmax,
    aten.roll.default: roll,
    aten._log_softmax.default: log_softmax,
    aten._safe_softmax.default: safe_softmax,
    aten.logsumexp.default: logsumexp,
    aten.var.correction: var,
    aten.std.correction: std,
    aten.var_mean.correction: var_mean,
    aten.lcm.default: lcm,
    aten.addbmm.default: addbmm,
    aten.put.default: put,
    aten.masked_scatter.default: masked_scatter,
    aten.put_.default: put_,
    aten.index_reduce.default: index_reduce,
    aten.frexp.Tensor: frexp,
    aten.nextafter.default: nextafter,
    aten.diag_embed.default: diag_embed,
    aten.std_mean.correction: std_mean,
    aten.mv.default: mv,
    aten.topk.default: topk,
    aten.trace.default: trace,
    aten.dot.default: dot,
    aten._trilinear.default: trilinear,
    aten._cdist_forward.default: cdist,
    aten.rot90.default: rot90,
    aten.linalg_vector_norm.default: vector_norm,
    aten.native_layer_norm.default: layer_norm,
    aten.native_group_norm.default: group_norm,
    aten.native_batch_norm.default: batch_norm,
    aten._native_batch_norm_legit.default: batch_norm_legit,
    aten._native_batch_norm_legit.no_stats: batch_norm_no_stats,
    aten._native_batch_norm_legit_no_training.default: batch_norm_no_training,
    aten.mse_loss.default: mse_loss,
    aten.l1_loss.default: l1_loss,
    aten.huber_loss.default: huber_loss,
    aten.smooth_l1_loss.default: smooth_l1_loss,
    aten.scatter_reduce.two: scatter_reduce,
    aten.triu_indices.default: _triangle_indices(upper=True),
    aten.tril_indices.default: _triangle_indices(upper=False),
    aten.nll_loss_forward.default: nll_loss_forward,
    aten.nll_loss2d_forward.default: nll_loss_forward,
    aten.binary_cross_entropy.default: binary_cross_entropy,
    aten.multilabel_margin_loss_forward.default: multilabel_margin_loss_forward,
}

# each window function's overloads (but its out= forms)
for _op, _fn in ((aten.hann_window, hann_window), (aten.hamming_window, hamming_window),
                 (aten.blackman_window, blackman_window), (aten.bartlett_window, bartlett_window),
                 (aten.kaiser_window, kaiser_window)):
    DECOMPOSITIONS.update({getattr(_op, o): _fn for o in _op.overloads() if not o.endswith("out")})
# torch's own decompositions (Inductor's) of ops with no lowering here, into indexed loads, views, products and
# pointwise ops that have one: resampling (nearest, linear, cubic, a sampling grid), pixel (un)shuffle, im2col,
# GLU, the batched and vector forms of addmm, renorm and two margin losses
DECOMPOSITIONS.update(torch._decomp.get_decompositions([
    aten.upsample_nearest1d, aten.upsample_nearest2d, aten.upsample_nearest3d, aten._upsample_nearest_exact1d,
    aten._upsample_nearest_exact2d, aten._upsample_nearest_exact3d, aten.upsample_linear1d,
    aten.upsample_bilinear2d, aten.upsample_trilinear3d, aten.upsample_bicubic2d, aten.grid_sampler_2d,
    aten.pixel_shuffle, aten.pixel_unshuffle, aten.im2col, aten.glu, aten.baddbmm, aten.addmv, aten.addr,
    aten.renorm, aten.margin_ranking_loss, aten.soft_margin_loss]))
DECOMPOSITIONS.update({op.default: upsample_linear for op in (aten.upsample_linear1d, aten.upsample_bilinear2d,
                                                              aten.upsample_trilinear3d)})
DECOMPOSITIONS.update({op.vec: upsample_linear_vec for op in (aten.upsample_linear1d, aten.upsample_bilinear2d,
                                                              aten.upsample_trilinear3d)})
DECOMPOSITIONS.update(torch._decomp.get_decompositions([  # these overloads only: the others lower as they are
    aten.col2im.default, aten.fill_.Scalar, aten.fill_.Tensor, aten.fill.Scalar, aten.new_zeros.default,
    aten.multi_margin_loss.default, aten.hinge_embedding_loss.default, aten.log_sigmoid_forward.default,
    aten.binary_cross_entropy_with_logits.default, aten.linalg_cross.default, aten.dist.default, aten.norm.Scalar,
    aten.norm.ScalarOpt_dim, aten.channel_shuffle.default, aten.aminmax.default, aten.any.default, aten.any.dim,
    aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims, aten.count_nonzero.default,
    aten.count_nonzero.dim_IntList, aten.floor_divide.default, aten.floor_divide.Scalar, aten.repeat.default,
    aten.nansum.default, aten.sinc.default, aten.eye.default, aten.eye.m, aten.linspace.default,
    aten.logspace.default, aten.reflection_pad1d.default, aten.reflection_pad2d.default,
    aten.reflection_pad3d.default, aten.replication_pad1d.default, aten.replication_pad2d.default,
    aten.replication_pad3d.default, aten._euclidean_dist.default, aten.fill.Tensor, aten.index_fill.int_Scalar,
    aten.index_fill.int_Tensor, aten.index_fill_.int_Scalar, aten.index_fill_.int_Tensor, aten.take.default,
    aten.ldexp.Tensor, aten.block_diag.default, aten.affine_grid_generator.default, aten.new_full.default,
    aten.index_copy.default, aten.index_copy_.default, aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar,
    aten.isin.Scalar_Tensor, aten.special_entr.default, aten.index_reduce_.default, aten.mvlgamma.default,
    aten._weight_norm_interface.default, aten.vdot.default, aten.diagonal_copy.default]))
