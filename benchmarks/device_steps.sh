#!/usr/bin/env bash
# The GPU benchmarks in resumable slices, for a lent GPU machine whose calls last under ten minutes each:
#
#   BUDGET=560 bash benchmarks/device_steps.sh STEP...     STEP: kb bf16 rw llm shapes (in the order given)
#
# Each step gets the seconds left of BUDGET (a step is not started with under 100 left) and resumes its own
# state folder under /tmp/kw-bench; on a fresh machine that state is first restored from $STATE (default
# .kb/state.tgz, a copy of an earlier call's archive). Before BUDGET is out every state folder and log goes into
# one archive, $OUT/state.tgz ($OUT: the folder the lending tool brings back). KernelBench's levels are read from
# $KERNELBENCH (default .kb/levels: ../shared does not travel). Wheels in $WHEELS (default .whl) are installed
# first where there are any; the code run is .kb/clean (a `git archive HEAD` export) where there is one, else this tree.
# LLM_BUDGET (default 3) is the llm step's evaluations per op. Steps use the GPUs in CUDA_VISIBLE_DEVICES, so
# invocations on disjoint GPUs can run side by side, each with its own OUT (each archives the whole state folder).
set -u
for step in "$@"; do
  case $step in kb|bf16|rw|llm|shapes) ;; *) echo "device_steps.sh: unknown step $step (kb bf16 rw llm shapes)"; exit 2 ;; esac
done
start=$(date +%s)
BUDGET=${BUDGET:-560} STATE=${STATE:-.kb/state.tgz} KERNELBENCH=$(realpath "${KERNELBENCH:-.kb/levels}")
OUT=${OUT:-/tmp/kw-bench-out} WORK=/tmp/kw-bench
left() { echo $((BUDGET - ($(date +%s) - start))); }
WHEELS=${WHEELS:-.whl}
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl && export PYTHONPATH=/tmp/site || exit 1
fi
[ -d "$WORK" ] || [ ! -f "$STATE" ] || { mkdir -p "$WORK" && tar xzf "$STATE" -C "$WORK"; }
mkdir -p "$WORK" "$OUT"
export KERNELWRIGHT_CACHE=$WORK/cache
[ -d .kb/clean ] && cd .kb/clean
nvidia-smi --query-gpu=name --format=csv,noheader
for step in "$@"; do
  l=$(left)
  [ "$l" -lt 100 ] && { echo "== $step: not started, $l s left"; continue; }
  echo "== $step, $l s left"
  run=(timeout -s INT $((l - 20)) python3)
  case $step in
    kb)   "${run[@]}" benchmarks/kernelbench_bench.py --out "$WORK/kb" --kernelbench "$KERNELBENCH" --budget 2 \
            --time-limit 120 --no-knowledge --max-seconds $((l - 120)) ;;
    bf16) "${run[@]}" benchmarks/kernelbench_bench.py --out "$WORK/bf16" --kernelbench "$KERNELBENCH" --levels 1,2 \
            --dtype bfloat16 --budget 2 --time-limit 120 --no-knowledge --max-seconds $((l - 120)) ;;
    rw)   "${run[@]}" benchmarks/rewrite_bench.py --out "$WORK/rw" --kernelbench "$KERNELBENCH" --budget 4 \
            --max-seconds $((l - 120)) ;;
    llm)  "${run[@]}" benchmarks/llm_ops_bench.py --out "$WORK/llm" --budget "${LLM_BUDGET:-3}" \
            --build-seconds $((l > 400 ? l - 200 : l - 150)) ;;
    shapes) "${run[@]}" benchmarks/shapes_bench.py --out "$WORK/shapes" --kernelbench "$KERNELBENCH" \
            --build-seconds $((l - 200)) --max-seconds $((l - 40)) ;;
  esac > "$WORK/$step.out" 2>&1
  echo "rc $?"
  tail -c 4000 "$WORK/$step.out"
done
tar czf "$OUT/state.tgz" -C "$WORK" --exclude=cache .
ls -la "$OUT"
