"""glibc malloc's thresholds and numpy's huge pages for the product's largest processes: the one place
that sets them."""

from __future__ import annotations

import os

#: mallopt's parameter numbers in glibc's malloc.h
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def set_malloc(mmap_threshold: int, trim_threshold: int | None = None) -> bool:
    """Set glibc malloc's mmap threshold (blocks from that size up mapped on their own) and, when
    given, its trim threshold (free memory at the heap's top kept up to that size). Nothing is set,
    and False returned, where the C library is not glibc or the process's environment sets malloc's own
    parameters (``MALLOC_*`` or ``GLIBC_TUNABLES``): the operator's choice wins. Results never depend
    on it; only how often freed pages are given back and faulted in again."""
    if os.name != "posix" or any(k.startswith("MALLOC_") or k == "GLIBC_TUNABLES" for k in os.environ):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: the parameter numbers above are its own
    except (OSError, AttributeError):
        return False
    done = bool(mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)))
    if trim_threshold is not None:
        done = bool(mallopt(M_TRIM_THRESHOLD, int(trim_threshold))) and done
    return done


def numpy_small_pages() -> bool:
    """Stop numpy asking the kernel for transparent huge pages on its large arrays (its default on
    Linux, ``madvise(MADV_HUGEPAGE)``). Where the kernel serves them only on request and compacts memory
    for them at the fault, as here, a 1,048,576-GPU solve's arrays spent 0.2-0.25 s more of system
    time (a whole 2 MiB zeroed or compacted per fault) than with pages of 4 KiB, in some runs and not in
    others (docs/performance.md, "Cold answers with less placing, and the solve process's pages").
    Nothing is set, and False returned, where the environment sets ``NUMPY_MADVISE_HUGEPAGE`` (the
    operator's choice wins) or this numpy has no such switch. Results never depend on it."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return False
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        try:
            from numpy.core import multiarray
        except ImportError:
            return False
    switch = getattr(multiarray, "_set_madvise_hugepage", None)
    if switch is None:
        return False
    switch(False)
    return True
