"""What the timing's L2 flush costs a memory-bound kernel: a device copy of each size timed twice by
tools/profile.time_call, after the flush every kernelwright figure uses (a buffer of twice the L2 written, its
lines left dirty, as a model's previous kernel leaves them) and after one that only reads that buffer (clean
lines), beside the speed-of-light floor (the bytes over the device's measured copy bandwidth). A kernel evicts
dirty lines as it goes, and their write-back shares the memory with its own traffic: the smaller the kernel, the
larger that share. It is why a small LLM-shaped kernel cannot come within 1.1x of its floor under kernelwright's
timing, and why a copy of as many bytes, timed the same way, is the fairer bar there (llm_ops_bench's kw/copy).

    python benchmarks/l2_state_bench.py [--sizes 16,32,64,128,256,1024]   # MB each way, fp32

GPU only: on a machine without CUDA it says so and exits 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from tools.evaluate import cache_dir  # noqa: E402
from tools.profile import device_ceilings, time_call  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="16,32,64,128,256,1024", help="copy sizes in MB each way, comma-separated")
    args = p.parse_args(argv)
    try:
        sizes = [int(x) for x in args.sizes.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        print(f"l2_state_bench: --sizes takes whole MB counts of 1 or more separated by commas, not {args.sizes!r}.")
        return 2
    if not torch.cuda.is_available():
        print("l2_state_bench: this benchmark times a GPU and none is visible (CUDA unavailable).")
        return 2
    dev = torch.device("cuda")
    bandwidth = device_ceilings(cache_dir())["copy_bytes_per_s"]
    print(f"{torch.cuda.get_device_name()}, floor at {bandwidth / 1e12:.2f} TB/s (bytes read + written)\n")
    print("| MB each way | floor ms | dirty L2 ms | clean L2 ms | dirty/clean | dirty/floor | clean/floor |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for mb in sizes:
        src = torch.randn(mb << 18, device=dev)
        dst = torch.empty_like(src)
        floor = 2 * src.nbytes / bandwidth * 1e3
        dirty, clean = (time_call(lambda: dst.copy_(src), dev, l2=s).median_ms for s in ("dirty", "clean"))
        print(f"| {mb} | {floor:.4f} | {dirty:.4f} | {clean:.4f} | {dirty / clean:.3f} | {dirty / floor:.2f} | "
              f"{clean / floor:.2f} |", flush=True)
        del src, dst
    return 0


if __name__ == "__main__":
    sys.exit(main())
