"""Trial inputs: what the evaluator calls a candidate with.

    seed = draw_seed()                                   # after the candidate is loaded: it cannot predict it
    inputs = make_inputs(setup, Draw(seed, scale=4.5, pattern="masked"))
    change_part(inputs, seed)                            # before the second call of a trial

Each trial's inputs are the task's own get_inputs() under a seed the candidate cannot predict, given the
shapes users' data has: a shifted mean with ties in some rows, or rows that are all negative, fully masked
(-1e4), masked in a suffix (-inf where the reference stays finite, else -1e4), all zero (a padded row) or
quiet (x1e-3: a mean square near a norm's eps), the last two where the reference stays finite; where the task's
loss ignores a target value (padding's -100), a masked draw's integer inputs hold it at 1/8 of their places.
Patterns apply to floating inputs only, in float32, before the cast to the task's dtype; a task with
scale_inputs off (cumprod) gets none. A widening (`Draw.widen`) makes a task whose output barely moves across
input sets tell a constant apart."""
from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

INPUT_SCALES = (1.0, 1.0, 4.5, 0.3, 1.7, 9.0)  # magnitude of float inputs per trial
PATTERNS = ("plain", "shifted", "masked")  # trial t gets PATTERNS[t % 3]
SHIFT = 3.0  # the shifted pattern adds SHIFT * scale: a wrong count in a mean shows once the mean is not 0
TIE_STEP = 0.5  # rows with ties are rounded to multiples of TIE_STEP * scale, and their maximum is repeated
TIE_BLOCK = 1 << 24  # elements of tied rows rounded at once (a copy of this many is the pattern's only one)
MASK = -1e4  # a masked element where -inf would make the reference itself non-finite
QUIET = 1e-3  # a quiet row's scale: its mean square (1e-6) is a norm's eps, which a kernel must not leave out
CHANGED_FRACTION = 8  # the second call of a trial sees 1/8 of each floating input changed in place
CHANGED_ELEMENTS = 3  # after the timing, one element of each floating input moved in place, this many times
WIDENINGS = ("", "signed", "scaled up x100", "scaled down x0.01", "other seeds")


@dataclass(frozen=True)
class Draw:
    """How one set of inputs is made: the seed, the magnitude, the pattern, the widening (3b) in force."""

    seed: int
    scale: float = 1.0
    pattern: str = "plain"  # one of PATTERNS
    widen: str = ""  # one of WIDENINGS
    masked_value: float = float("-inf")  # for the masked pattern
    quiet_rows: bool = True  # for the masked pattern: one row all zero and one at QUIET scale
    ignored: int | None = None  # for the masked pattern: a target value the task's loss skips, in its integers

    def describe(self) -> str:
        """How a failure names these inputs: "shifted inputs x4.5, widened (signed)"."""
        return f"{self.pattern} inputs x{self.scale:g}" + (f", widened ({self.widen})" if self.widen else "")


def draw_seed() -> int:
    """A trial seed from the operating system: nothing in the candidate's process decides it."""
    return secrets.randbelow(1 << 31)


def trial_draw(seed: int, t: int, scale_inputs: bool, widen: str) -> Draw:
    scale = INPUT_SCALES[t % len(INPUT_SCALES)] if scale_inputs else 1.0
    pattern = PATTERNS[t % len(PATTERNS)] if scale_inputs else "plain"
    return Draw(seed * 1000 + t, scale, pattern, widen)


def make_inputs(setup, draw: Draw) -> list:
    """The task's inputs for one draw, on the device, patterned, cast and scaled. Each input is replaced in the
    list as soon as its new copy exists, so one input at most is held twice, and only for a moment (changing
    in place could compound on a tensor that get_inputs() returns every time)."""
    torch.manual_seed(draw.seed + (7 if draw.widen == "other seeds" else 0))
    with torch.device(setup.device):
        inputs = list(setup.task.get_inputs())
    rng = torch.Generator().manual_seed(draw.seed)
    for i in range(len(inputs)):
        x = inputs[i]
        if not isinstance(x, torch.Tensor):
            continue
        x = x.to(setup.device)
        if draw.pattern == "masked" and draw.ignored is not None and x.dtype == torch.long and x.numel() > 1:
            at = torch.zeros(x.numel(), dtype=torch.bool)
            at[torch.randperm(x.numel(), generator=rng)[:max(1, x.numel() // 8)]] = True
            x = x.clone().masked_fill_(at.view(x.shape).to(x.device), draw.ignored)
        if x.is_floating_point():
            dtype = setup.dtype or x.dtype
            x = _shaped(x.float() * draw.scale, draw, rng) if draw.pattern != "plain" or draw.widen else (
                x * draw.scale)  # a copy even at 1.0: trials never share get_inputs()' tensors
            x = x.to(dtype)
        inputs[i] = x
    return inputs


def _shaped(x: torch.Tensor, draw: Draw, rng: torch.Generator) -> torch.Tensor:
    """x (float32, already scaled) widened and patterned; `rng` picks signs and rows."""
    if draw.widen == "signed":
        x = x * (torch.randint(0, 2, x.shape, generator=rng).to(x.device) * 2 - 1)
    elif draw.widen.startswith("scaled"):
        x = x * float(draw.widen.split("x")[-1])
    if draw.pattern == "plain" or x.dim() == 0 or x.numel() == 0:
        return x
    y = x.contiguous()  # the patterns are written in rows; x keeps the strides get_inputs() gave it
    rows = y.view(-1, y.shape[-1]) if y.dim() > 1 else y.view(1, -1)
    order = torch.randperm(rows.shape[0], generator=rng)
    if draw.pattern == "shifted":
        rows.add_(SHIFT * draw.scale)
        step = TIE_STEP * draw.scale
        tied = order[: max(1, len(order) // 3)].to(rows.device)  # a third of the rows rounded, their largest twice
        for part in tied.split(max(1, TIE_BLOCK // rows.shape[1])):  # a block of rows at a time, never a third
            block = torch.round(rows[part] / step) * step
            block[torch.arange(len(part), device=rows.device), block.argmin(dim=1)] = block.amax(dim=1)
            rows[part] = block
    elif draw.pattern == "masked" and x.dim() > 1:
        cut = int(torch.randint(1, max(rows.shape[1], 2), (1,), generator=rng))
        picks = iter(order[:5].tolist())
        masked_suffix, masked_all, negative, zero, quiet = next(picks), *(next(picks, None) for _ in range(4))
        rows[masked_suffix, cut:] = draw.masked_value
        if masked_all is not None:
            rows[masked_all] = MASK
        if negative is not None:
            rows[negative] = -rows[negative].abs() - draw.scale
        if zero is not None and draw.quiet_rows:
            rows[zero] = 0.0
        if quiet is not None and draw.quiet_rows:
            rows[quiet] *= QUIET
    return y if y is x else x.copy_(y)


def with_finite_mask(inputs: list) -> None:
    """The masked pattern's -inf elements become MASK, in place (where -inf makes the reference non-finite)."""
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            x.masked_fill_(x == float("-inf"), MASK)


def change_part(inputs: list, seed: int) -> None:
    """Before a trial's second call: a run of 1/CHANGED_FRACTION of each floating input, at a place the seed
    picks, overwritten in place with the input's own finite values from another place. Values the input already
    holds keep it in its domain (a probability stays one), and neither a shift nor a scale (a normalization is
    blind to both) nor a reordering within a row (a sum is blind to that) describes the change."""
    rng = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for x in inputs:
            if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1):
                continue
            flat = x.view(-1) if x.is_contiguous() else x.reshape(-1)  # a strided input: changed via a copy
            n = max(1, flat.numel() // CHANGED_FRACTION)
            start = int(torch.randint(0, flat.numel() - n + 1, (1,), generator=rng))
            source = (start + flat.numel() // 2) % (flat.numel() - n + 1)
            part, other = flat[start:start + n], flat[source:source + n].clone()
            part.copy_(torch.where(torch.isfinite(part) & torch.isfinite(other), other, part))
            if not x.is_contiguous():
                x.copy_(flat.view(x.shape))


class Nudge:
    """Each call moves one element of each floating input (whatever its strides), at a place drawn from `seed`,
    to the input's value from another drawn place. Before each timed run of a candidate: results memoized under
    a hash of all the inputs (every verification changes them, the timing loop did not) are computed anew at
    every run. After the timing: a result kept while a sample of the inputs looks the same (every 64th element
    compared) misses the moved one, where a run of 1/8 or new values throughout cross its sample."""

    def __init__(self, inputs: list, seed: int, places: int = 2048):
        g = torch.Generator().manual_seed(seed)
        self.inputs = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1]
        self.places = []
        for x in self.inputs:
            at = torch.randint(0, x.numel(), (places,), generator=g)
            source = (at + torch.randint(1, x.numel(), (places,), generator=g)) % x.numel()  # never the place itself
            self.places.append(torch.stack([at, source], 1).to(x.device))
        self.run, self.cycle = 0, places

    def __call__(self) -> None:
        k, self.run = self.run % self.cycle, self.run + 1
        with torch.no_grad():
            for x, places in zip(self.inputs, self.places):
                at, source = (torch.unravel_index(places[k, j:j + 1], x.shape) for j in (0, 1))
                x[at] = x[source]
