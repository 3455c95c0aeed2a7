"""glibc malloc's thresholds set in one place (unicron_plan.heap)."""

import os

import pytest

from unicron_plan import heap


def _glibc() -> bool:
    import ctypes

    try:
        ctypes.CDLL(None).gnu_get_libc_version
    except (OSError, AttributeError):
        return False
    return True


def _clear_malloc_environment(monkeypatch):
    for k in [k for k in os.environ if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"]:
        monkeypatch.delenv(k)


def test_the_environment_s_malloc_parameters_win(monkeypatch):
    calls = []
    monkeypatch.setattr("ctypes.CDLL", lambda *a: calls.append(a))  # would be read if anything were set
    for name in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES"):
        _clear_malloc_environment(monkeypatch)
        monkeypatch.setenv(name, "2" if name.startswith("MALLOC") else "glibc.malloc.arena_max=2")
        assert heap.set_malloc(1 << 20, 1 << 20) is False
    assert not calls


def test_another_c_library_is_left_alone(monkeypatch):
    _clear_malloc_environment(monkeypatch)

    class NotGlibc:
        def mallopt(self, *a):
            raise AssertionError("mallopt called on a library that is not glibc")

    monkeypatch.setattr("ctypes.CDLL", lambda *a: NotGlibc())
    assert heap.set_malloc(1 << 20) is False


def test_glibc_takes_both_thresholds(monkeypatch):
    if not _glibc():
        pytest.skip("not glibc")
    _clear_malloc_environment(monkeypatch)
    import ctypes

    real = ctypes.CDLL(None)
    seen = []

    class Recording:
        gnu_get_libc_version = real.gnu_get_libc_version

        def mallopt(self, param, value):
            seen.append((param, value))
            return 1

    monkeypatch.setattr("ctypes.CDLL", lambda *a: Recording())
    assert heap.set_malloc(32 << 20, 64 << 20) is True
    assert seen == [(heap.M_MMAP_THRESHOLD, 32 << 20), (heap.M_TRIM_THRESHOLD, 64 << 20)]
    seen.clear()
    assert heap.set_malloc(2**31 - 1) is True and seen == [(heap.M_MMAP_THRESHOLD, 2**31 - 1)]


def test_numpy_small_pages_turns_numpys_huge_pages_off_unless_the_environment_says(monkeypatch):
    """numpy's transparent huge pages are switched off, and left as they are where the operator's
    environment sets NUMPY_MADVISE_HUGEPAGE."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray
    before = multiarray._get_madvise_hugepage()
    try:
        multiarray._set_madvise_hugepage(True)
        monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
        assert heap.numpy_small_pages() is False and multiarray._get_madvise_hugepage() is True
        monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE")
        assert heap.numpy_small_pages() is True and multiarray._get_madvise_hugepage() is False
    finally:
        multiarray._set_madvise_hugepage(before)
