"""The sandboxed side of an evaluation: `main(JOB.json, RESULT.json)`, called by tools/forkserver.py in a
job's scratch directory. Loads the task and the candidate, verifies, profiles, and writes one EvalResult. Anything the candidate does wrong ends in a verdict; only a dead process ends in none."""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path


def main(job_path: str, result_path: str):
    """Evaluates the job and writes its result: (the result, whether this process is still clean enough to
    take another candidate). A candidate that changed the process's global state is rejected for it."""
    started = time.perf_counter()
    from tools.clean import StateWatch
    from tools.results import EvalResult, job_from_json

    job = job_from_json(json.loads(open(job_path).read()))
    watch = StateWatch()
    result = evaluate_here(job, watch)
    changed, clean = watch.finish()
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        result = EvalResult("rejected", f"Rejected (global-state): it changed the worker's global state "
                                        f"({'; '.join(changed[:3])}{more}), which would sway later verdicts.",
                            device=result.device, interpreted=result.interpreted, verified_on=result.verified_on)
    result.seconds = time.perf_counter() - started
    with open(result_path + ".tmp", "w") as f:
        json.dump(result.to_json(), f)
    os.replace(result_path + ".tmp", result_path)
    return result, clean


def evaluate_here(job, watch=None):
    """One evaluation in this process; `watch` (a tools.clean.StateWatch) snapshots the global state once the
    evaluator has set it up and again just before the candidate's code first runs."""
    import torch

    from tools.compile_info import from_kernels, write_specs
    from tools.deep import deep_verify
    from tools.guard import LaunchRecorder
    from tools.results import VERIFIED_ON, EvalResult
    from tools.rules import check_source
    from tools.task import TaskError, import_file, load_task_module
    from tools.verify import TF32_TOLERANCE, TOLERANCES, Failed, Setup, verify

    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda" if on_gpu else "cpu")
    device_name = torch.cuda.get_device_name() if on_gpu else "cpu (Triton interpreter)"
    base = dict(device=device_name, interpreted=not on_gpu, verified_on="gpu" if on_gpu else "interpreter")
    spec = job.task
    torch.backends.cuda.matmul.allow_tf32 = spec.tf32
    torch.backends.cudnn.allow_tf32 = spec.tf32
    recorder = LaunchRecorder()
    recorder.install()
    if watch is not None:
        watch.start()

    small = spec.small if spec.small is not None else not on_gpu
    phases, lap = {}, _stopwatch()
    try:
        task = load_task_module(spec, small)
        init, reference = build_reference(task, job.seed, device)
        warm_reference(task, reference, device)
    except TaskError as e:
        return EvalResult("error", str(e), task_error=True, **base)
    except Exception as e:
        return EvalResult("error", f"The task could not be loaded: {_describe(e)}.", task_error=True, **base)

    rule = check_source(job.candidate, Path(spec.path).read_text())
    if rule:
        return EvalResult("rejected", rule, **base)
    with open("candidate.py", "w") as f:
        f.write(job.candidate)
    if watch is not None:
        watch.candidate_starts()
    try:
        module = import_file("candidate.py", "kw_candidate")
        if not hasattr(module, "ModelNew"):
            return EvalResult("error", "The candidate defines no class ModelNew.", **base)
        candidate = build_candidate(module, init, job.seed, device)
    except Exception as e:
        return EvalResult("error", f"The candidate could not be loaded: {_describe(e)}.", **base)
    unfit = vary_state(reference, candidate, job.seed)
    if unfit:
        return EvalResult("incorrect", f"Incorrect: {unfit}.", **base)

    dtype = getattr(torch, spec.dtype) if spec.dtype else None
    if dtype:
        reference, candidate = reference.to(dtype), candidate.to(dtype)
    tol = TF32_TOLERANCE if spec.tf32 else TOLERANCES.get(dtype or torch.float32, TOLERANCES[torch.float32])
    if spec.atol is not None or spec.rtol is not None:
        tol = (spec.atol if spec.atol is not None else tol[0], spec.rtol if spec.rtol is not None else tol[1], tol[2])
    setup = Setup(task, reference, candidate, device, dtype, tol, list(getattr(module, "KERNELWRIGHT_TORCH_OPS", [])),
                  recorder, spec.scale_inputs, explicit_tolerance=spec.atol is not None or spec.rtol is not None)
    phases["setup"] = lap()
    try:
        checked = verify(setup, job.trials, job.trial_seed)
        phases["verify"] = lap()
        deep = deep_verify(setup, job.deep, checked) if job.deep else None
        if deep is not None:
            phases["deep"] = lap()
            if deep.failed:
                return EvalResult(deep.worst_verdict, f"{deep.worst_reason.rstrip('.')} (under --deep, "
                                  f"{deep.failed} of {deep.sets} input sets failed; worst: {deep.worst_input}).",
                                  max_abs_err=deep.worst_abs_err, rel_err=deep.worst_rel_err, deep=deep, **base)
        timed = on_gpu and job.profile  # interpreter times at the other sets would say nothing
        shapes, failed = verify_shape_sets(job, setup, checked, module, small, timed) if spec.shape_sets else ([], None)
        if shapes:
            phases["shapes"] = lap()
        if failed is not None:
            check, task_error = failed
            return EvalResult(check.verdict, f"At {describe_shapes(check.shapes)}: {check.reason}", shapes=shapes,
                              task_error=task_error, max_abs_err=check.max_abs_err, rel_err=check.rel_err, **base)
        # Compile metadata never counts against the candidate's time: read from the kernels on a GPU, compiled by
        # the parent after the verdict on a CPU (tools/compile_info.py), and there only for a profile (the
        # sm_90 compile takes seconds; a correctness check has no use for registers and spills).
        info = from_kernels(recorder.first) if on_gpu else write_specs(recorder.first) if job.profile else None
        timing, baselines, suspicious = None, None, False
        if job.profile:
            from tools.measure import measure
            timing, baselines, suspicious = measure(setup, job, checked)
            phases["profile"] = lap()
            if shapes and timed:
                shapes[0] = replace(shapes[0], ms=timing.ms, eager_ms=timing.eager_ms, compile_ms=timing.compile_ms)
                baselines.at_shapes = {describe_shapes(c.shapes): [c.eager_ms, c.compile_ms] for c in shapes[1:]}
    except Failed as e:
        return EvalResult(e.verdict, e.sentence(), task_error=e.task_error, rel_err=e.rel_err,
                          own_rel_err=e.own_rel_err, **base)
    except Exception as e:
        return EvalResult(*_crashed(e), **base)
    reason = "Correct on every trial" + (f" and on {deep.sets} --deep input sets" if deep else "") + (
        f" at the task's own shapes and at {len(shapes) - 1} more shape sets" if shapes else "") + (
        "; faster than the speed-of-light floor, so it was re-verified and is flagged" if suspicious else "") + (
        "; the task's output is a constant, the same on every input set also in a wider run, and the kernel "
        "reproduces it" if checked.constant else "") + (
        "" if on_gpu else f"; an interpreter verdict ({VERIFIED_ON['interpreter']})") + "."
    return EvalResult("correct", reason, timing=timing, compile=info, max_abs_err=checked.max_abs_err,
                      rel_err=checked.rel_err, own_rel_err=checked.own_rel_err, torch_ops=checked.torch_ops,
                      suspicious=suspicious, deep=deep, baselines=baselines, phase_seconds=phases,
                      kernel_ms=checked.kernel_ms, shapes=shapes, **base)


def describe_shapes(shapes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in shapes.items()) or "the task's own shapes"


def verify_shape_sets(job, setup, checked, module, small: bool, timed: bool = False):
    """The candidate verified at each of the task's shape sets after its own shapes passed: ([ShapeCheck], the
    first failing one with whether the task itself failed there, or None). Each set loads the task again with its
    globals (as a module of its own name: sys.modules["kw_task"] stays), builds the reference and the candidate
    from that set's init inputs and the job's seed, and runs the same trials under the same trial seed. Where
    `timed` (a GPU profile), each set is also timed until one fails: the result is not correct after that."""
    from tools.results import ShapeCheck
    names = list(dict.fromkeys(k for shape_set in job.task.shape_sets for k in shape_set))
    own = {n: getattr(setup.task, n) for n in names}
    out = [ShapeCheck(own, "correct", "Correct on every trial.", max_abs_err=checked.max_abs_err,
                      rel_err=checked.rel_err)]
    failed = None
    for i, shape_set in enumerate(job.task.shape_sets):
        check, task_error = _verify_at(job, setup, module, small, {**own, **shape_set}, i, checked.seed,
                                       timed and failed is None)
        sys.modules.pop(f"kw_task_shapes{i}", None)  # the next job in this worker loads its own under this name:
        # one replaced in sys.modules is a change the clean check (tools/clean.py) rejects that job's candidate for
        out.append(check)
        if check.verdict != "correct" and failed is None:
            failed = (check, task_error)
    return out, failed


def _verify_at(job, setup, module, small: bool, shape_set: dict, index: int, seed: int, timed: bool):
    """(ShapeCheck, whether the task itself failed) at one shape set, with its times where `timed` and it is
    correct. A candidate that ran no kernel there (a guarded template candidate's fallback to the task's PyTorch
    code, which says so through `warnings`) is rejected by the runtime rules as anywhere else, and its check says
    it took the fallback."""
    import warnings

    from tools.results import ShapeCheck
    from tools.rules import RUNTIME_REASONS
    from tools.task import load_task_module
    from tools.verify import Failed, verify

    device = setup.device
    try:
        task = load_task_module(job.task, small, shape_set, f"kw_task_shapes{index}")
        init, reference = build_reference(task, job.seed, device)
    except Exception as e:
        return ShapeCheck(shape_set, "error", f"The task could not be loaded at these shapes: {_describe(e)}."), True
    for name, value in shape_set.items():  # the candidate carries the task's source: its globals follow the task's
        if hasattr(module, name):
            setattr(module, name, value)
    try:
        candidate = build_candidate(module, init, job.seed, device)
    except Exception as e:
        return ShapeCheck(shape_set, "error", f"The candidate could not be built at these shapes: {_describe(e)}."), False
    unfit = vary_state(reference, candidate, job.seed)
    if unfit:
        return ShapeCheck(shape_set, "incorrect", f"Incorrect: {unfit}."), False
    if setup.dtype:
        reference, candidate = reference.to(setup.dtype), candidate.to(setup.dtype)
    at = replace(setup, task=task, reference=reference, candidate=candidate, golden={})
    figures, times, task_error = (None, None), (None, None, None), False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            done = verify(at, job.trials, seed)
            verdict, reason, figures = "correct", "Correct on every trial.", (done.max_abs_err, done.rel_err)
            if timed:
                from tools.measure import measure_at
                times = measure_at(at, done, _known_baselines(job, shape_set))
        except Failed as e:
            verdict, reason, task_error = e.verdict, e.sentence(), e.task_error
        except Exception as e:
            verdict, reason = _crashed(e)
    said = [str(w.message) for w in caught if str(w.message).startswith("kernelwright candidate:")]
    fallback = verdict == "rejected" and (bool(said) or RUNTIME_REASONS["no-kernel"] in reason)
    if fallback:
        need = said[0].partition(" need ")[2].partition(";")[0] if said else ""
        reason = ("It took its fallback to the task's PyTorch code here, so no kernel is verified at these shapes ("
                  + (f"its kernels need {need}" if need else "it launched no Triton kernel") + ").")
    return ShapeCheck(shape_set, verdict, reason, fallback, *figures, *times), task_error


def _known_baselines(job, shape_set: dict) -> list | None:
    """[eager_ms, compile_ms] at this shape set from earlier in the run on this device, if measured."""
    import torch
    b = job.baselines
    return b.at_shapes.get(describe_shapes(shape_set)) if b and b.device == torch.cuda.get_device_name() else None


def build_reference(task, seed: int, device) -> tuple[list, object]:
    """The task's constructor arguments and its reference module, made under `seed` on `device`."""
    import torch
    torch.manual_seed(seed)
    with torch.device(device):
        init = task.get_init_inputs()
        reference = task.Model(*init)
    return init, reference.to(device)


def warm_reference(task, reference, device) -> None:
    """One call of the reference on the task's own inputs before the candidate's code runs: what PyTorch sets up
    at a first call (torch.vmap registers Python kernels then) is the task's doing, and the state watch
    (tools/clean.py) would otherwise count it against the candidate."""
    import torch
    with torch.no_grad(), torch.device(device):
        reference(*task.get_inputs())


def build_candidate(module, init: list, seed: int, device):
    """The candidate module's ModelNew, made from the task's constructor arguments under `seed` on `device`."""
    import torch
    torch.manual_seed(seed)
    with torch.device(device):
        candidate = module.ModelNew(*init)
    return candidate.to(device)


STATS = ("running_mean", "running_var")  # the buffers training moves: a norm's statistics; others are constants


def vary_state(reference, candidate, seed: int) -> str | None:
    """New values for the reference's floating parameters and its norms' running statistics, loaded into the
    candidate's tensors of the same names: a kernel that read the values the constructor drew (copies kept
    outside the state_dict, a norm's initial ones and zeros taken for granted) passed, and would be wrong in a
    trained model. Each element is scaled by a draw from [0.5, 1.5] (a variance stays positive); a zero becomes
    a draw from [-0.5, 0.5]. Returns why the candidate cannot take them (no tensor of that name and shape), or
    None."""
    import torch
    g = torch.Generator().manual_seed(seed + 17)
    ours, theirs = reference.state_dict(keep_vars=True), candidate.state_dict(keep_vars=True)
    names = [n for n, t in ours.items() if t.is_floating_point() and t.numel() > 0 and (
        isinstance(t, torch.nn.Parameter) or n.rsplit(".", 1)[-1] in STATS)]
    done = set()
    with torch.no_grad():
        for name in names:
            t = ours[name]
            if (t.data_ptr(), t.shape) in done:  # a tensor tied under two names moves once
                continue
            done.add((t.data_ptr(), t.shape))
            r = torch.rand(t.shape, generator=g, dtype=torch.float64).to(t.device)
            t.copy_(torch.where(t == 0, r - 0.5, t.double() * (0.5 + r)))
        for name in names:
            twin = theirs.get(name)
            if twin is None or twin.shape != ours[name].shape:
                return (f"ModelNew holds no tensor {name} of shape {tuple(ours[name].shape)}, so it cannot take a "
                        f"trained model's values: the evaluator gives the reference's parameters new values and "
                        f"loads them into ModelNew by name, as load_state_dict would")
            twin.copy_(ours[name])
    return None


def _crashed(e: Exception) -> tuple[str, str]:
    """The verdict and reason of a candidate that raised while it was verified or timed."""
    if type(e).__name__ == "CompilationError":
        return "error", f"A Triton kernel did not compile: {_describe(e)}."
    return "crash", f"The candidate crashed: {_describe(e)}."


def _stopwatch():
    """Returns a function giving the seconds since its previous call (or since the stopwatch started)."""
    last = [time.perf_counter()]

    def lap() -> float:
        now = time.perf_counter()
        seconds, last[0] = now - last[0], now
        return round(seconds, 3)
    return lap


def _describe(e: BaseException) -> str:
    """One line: the exception type and its last message line, with the candidate's line if there is one."""
    lines = str(e).strip().splitlines()
    where = ""
    for frame in traceback.extract_tb(e.__traceback__):
        if frame.filename.endswith("candidate.py"):
            where = f" (candidate.py line {frame.lineno})"
    if isinstance(e, SyntaxError) and e.lineno:
        where = f" (line {e.lineno})"
        lines = [e.msg]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}{where}"[:400]

