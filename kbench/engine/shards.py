"""Slices of a sweep's grid: `--shard i/N`, or `--shard auto` where a scheduler runs the slices (a Slurm array,
a Kubernetes Indexed Job), and the per-GPU slices of `--devices` (kbench.engine.devices); `kbench merge` joins
them (kbench.runs.merge)."""
from __future__ import annotations

import os
from collections.abc import Mapping

from kbench.cases.case import Case
from kbench.errors import BadInput
from kbench.values import ascii_digits

SLURM = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT")
KUBERNETES = "JOB_COMPLETION_INDEX"


def parse_shard(text: str, env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """`i/N` with 0 <= i < N; `auto` or `auto/N`: this task's slice, from the scheduler's variables (auto_shard)."""
    if text.strip().split("/")[0].strip() == "auto":
        return auto_shard(text.strip(), os.environ if env is None else env)
    i, sep, n = text.partition("/")
    if not sep or not ascii_digits(i) or not ascii_digits(n) or not 0 <= int(i) < int(n):
        raise BadInput(f"--shard: expected i/N with 0 <= i < N, or auto, got {text!r}")
    return int(i), int(n)


def _int(env: Mapping[str, str], name: str, text: str) -> int:
    if name not in env:
        raise BadInput(f"--shard {text}: {name} is not set (the scheduler sets it for each task)")
    v = env.get(name, "").strip()
    if not ascii_digits(v):
        raise BadInput(f"--shard {text}: {name}={env.get(name)!r} is not a task number")
    return int(v)


def auto_shard(text: str, env: Mapping[str, str]) -> tuple[int, int]:
    """A Slurm array task: (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP of
    SLURM_ARRAY_TASK_COUNT tasks (so --array=1-8 and --array=0-14:2 both give 0..N-1; a list such as --array=1,4,9
    has no such numbering and is refused, in every task: SLURM_ARRAY_TASK_MAX is not MIN + (COUNT-1)*STEP). A Kubernetes Indexed Job: JOB_COMPLETION_INDEX of N, N given as
    `auto/N` (the Job's completions: the pod is not told). `auto/N` under Slurm must agree with the array."""
    _, sep, count = text.partition("/")
    if sep and (not ascii_digits(count) or int(count) < 1):
        raise BadInput(f"--shard {text}: expected auto or auto/N with N >= 1")
    given = int(count) if sep else None
    if SLURM[0] in env:
        task, first, n = (_int(env, v, text) for v in SLURM)
        step = _int(env, "SLURM_ARRAY_TASK_STEP", text) if env.get("SLURM_ARRAY_TASK_STEP") else 1
        if step < 1:
            raise BadInput(f"--shard {text}: SLURM_ARRAY_TASK_STEP={step} is not a step (Slurm's are 1 or more)")
        k, off = divmod(task - first, max(step, 1))
        last = _int(env, "SLURM_ARRAY_TASK_MAX", text) if env.get("SLURM_ARRAY_TASK_MAX") else None
        if last is not None and last != first + (n - 1) * max(step, 1):  # a list (--array=1,4,9): no k*STEP numbering
            raise BadInput(f"--shard {text}: the Slurm array is not a range (MIN {first}, MAX {last}, COUNT {n}, STEP "
                           f"{step}: a list such as --array=1,4,9); submit it as a range, e.g. --array=0-{n - 1}")
        if task < first or off or k >= n:
            raise BadInput(f"--shard {text}: Slurm array task {task} is not MIN + k*STEP for k < COUNT ({first}, "
                           f"{step}, {n}): submit the array as a range, e.g. --array=0-{n - 1}")
        if given is not None and given != n:
            raise BadInput(f"--shard {text}: the Slurm array has {n} tasks (SLURM_ARRAY_TASK_COUNT), not {given}")
        return k, n
    if KUBERNETES in env:
        i = _int(env, KUBERNETES, text)
        if given is None:
            raise BadInput(f"--shard auto: a Kubernetes Indexed Job gives the index ({KUBERNETES}={i}) but not the "
                           "number of slices: give it as --shard auto/N (N = the Job's completions)")
        if i >= given:
            raise BadInput(f"--shard {text}: {KUBERNETES}={i} is not below {given}")
        return i, given
    raise BadInput(f"--shard {text}: no Slurm array ({SLURM[0]}) or Kubernetes Indexed Job ({KUBERNETES}) here; "
                   "give the slice as --shard i/N")


def shard_cases(cases: list[Case], shard: tuple[int, int] | None) -> list[Case]:
    """A deterministic slice: case j of the grid goes to shard j mod N (neighbouring shapes spread out,
    so slices cost about the same). Every case is in exactly one shard."""
    if not shard:
        return cases
    i, n = shard
    return [c for j, c in enumerate(cases) if j % n == i]


def check_device(index: int, available: int) -> int:
    """--device: a GPU index this machine has (``available``: the GPUs torch sees). A negative index is refused
    everywhere; on a machine without a GPU only the default 0 is taken (the sweep runs on the CPU: another index
    would name a GPU that is not there)."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise BadInput(f"--device {index}: expected a GPU index, 0 or more")
    if available == 0 and index != 0:
        raise BadInput(f"--device {index}: this machine has no GPU that torch can use (a sweep here runs on the "
                       f"CPU): drop --device")
    if available and index >= available:
        raise BadInput(f"--device {index}: GPU {index} does not exist (this machine has {available}: "
                       f"0..{available - 1})")
    return index


def parse_devices(text: str, available: int | None = None) -> list[int]:
    """GPU indices, each once; with ``available`` (the GPUs torch sees) each must exist."""
    parts = [x for x in text.split(",") if x.strip()]
    if not parts or not all(ascii_digits(x) for x in parts):  # int() takes '١' and '０' too
        raise BadInput(f"--devices: expected a list of GPU indices such as 0,1, got {text!r}")
    devs = [int(x) for x in parts]
    if not devs or min(devs) < 0:
        raise BadInput(f"--devices: expected a list of GPU indices such as 0,1, got {text!r}")
    dup = sorted({d for d in devs if devs.count(d) > 1})
    if dup:
        raise BadInput(f"--devices {text}: GPU {dup[0]} is listed twice (one worker per GPU)")
    if available is not None:
        if available == 0:
            raise BadInput(f"--devices {text}: this machine has no GPU that torch can use; drop --devices to "
                           f"sweep on the CPU")
        bad = [d for d in devs if d >= available]
        if bad:
            raise BadInput(f"--devices {text}: GPU {bad[0]} does not exist (this machine has {available}: "
                           f"0..{available - 1})")
    return devs
