"""A memory estimate before a run allocates its batches: a setting whose batch cannot fit is a one-line error naming
it, not a machine that swaps for an hour or a process killed without a word by the kernel's out-of-memory killer.

Each estimate is the peak resident memory per item measured on this project's 2-core machines (``/usr/bin/time -f %M``
on runs of a few updates at two batch sizes; the difference divided by the items), without the fixed cost of the
interpreter and torch (about 0.4 GB). They are estimates, not bounds: the refusal is for settings that exceed the
available memory, and a setting within it can still run out beside other work.
"""

from __future__ import annotations

import os

from .settings import ConfigError

__all__ = ["available_bytes", "require_memory"]


def available_bytes() -> int:
    """The memory the kernel could hand out now without swapping (``MemAvailable``), else the physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def require_memory(estimate: float, setting: str) -> None:
    """Raise a :class:`~gflownet_measure.experiments.settings.ConfigError` naming ``setting`` when ``estimate`` bytes exceed the available memory."""
    free = available_bytes()
    if estimate > free:
        raise ConfigError(
            f"{setting} needs about {estimate / 2**30:,.1f} GiB of memory at its peak (estimated), and {free / 2**30:,.1f} GiB is available; lower it"
        )
