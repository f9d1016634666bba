"""Where a case's inputs go: how many copies of them rotate through the timed calls so that L2 is cold (as an
engine sees it: other layers evict a layer's KV before the next step), whether they fit in device (or host)
memory at all, and the `l2` label of the rows. Decided before anything is allocated."""
from __future__ import annotations

import math
from dataclasses import dataclass

from kbench.cases.case import Case
from kbench.cases.scenario import Timing
from kbench.device import DeviceInfo
from kbench.kernels.inputs import copy_bytes, table_bytes

# input copies rotate until they cover this many times the L2 (cold-L2 is what an engine sees)
L2_COVER = 3
MAX_COPIES = 64
# device memory kept free beyond what a case needs (reference temporaries, workspaces, allocator slack)
HEADROOM_BYTES = 6 << 30
HOST_HEADROOM_BYTES = 1 << 30


def copies_for(case: Case, device: DeviceInfo, timing: Timing) -> int:
    if not device.cuda or timing.l2 != "rotate" or not device.l2_bytes:
        return 1
    return max(1, min(MAX_COPIES, math.ceil(L2_COVER * device.l2_bytes / max(copy_bytes(case), 1))))


def fits(case: Case, copies: int, device: DeviceInfo) -> str | None:
    """Why the case cannot fit on the device (checked before anything is allocated), or None."""
    from kbench.timing.hardware import host_available_bytes

    tables = table_bytes(case)  # built on the host first, then copied to the device
    of_which = f" (page tables {tables / 2**30:.1f} GiB)" if tables >= 1 << 30 else ""
    avail = host_available_bytes()
    host_need = (2 * copies * copy_bytes(case) if not device.cuda else 0) + tables + HOST_HEADROOM_BYTES
    if avail is not None and host_need > avail:  # host memory: inputs plus the float32 reference's working set
        return f"needs {host_need / 2**30:.1f} GiB of host memory{of_which}, {avail / 2**30:.1f} GiB available"
    if not device.cuda:
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(device.index)
    need = copies * copy_bytes(case) + tables + HEADROOM_BYTES
    if need > free:
        return f"needs {need / 2**30:.1f} GiB of device memory{of_which}, {free / 2**30:.1f} GiB free"
    return None


@dataclass
class Placement:
    """Where a case's inputs go: how many input copies rotate through the timed calls, and the rows' `l2`."""
    copies: int
    l2: str  # cpu | rotate-N | warm | exceeds-3xL2


def placement(case: Case, device: DeviceInfo, timing: Timing) -> Placement | str:
    """As many copies as cover L2_COVER x L2 (cold L2, as an engine sees it), halved until they fit; or why
    not even one copy fits (checked before anything is allocated)."""
    no_fit = fits(case, 1, device)
    if no_fit:
        return no_fit
    copies = copies_for(case, device, timing)
    while copies > 1 and fits(case, copies, device):
        copies //= 2
    if not device.cuda:
        l2 = "cpu"
    elif copies > 1:
        l2 = f"rotate-{copies}"
    elif timing.l2 == "warm":
        l2 = "warm"
    else:  # one copy already spans L2_COVER x L2: every call streams it from HBM
        l2 = f"exceeds-{L2_COVER}xL2"
    return Placement(copies, l2)
