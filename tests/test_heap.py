"""`proftab._heap.reuse_heap`: glibc heap reuse while nesting, the scanner's setting restored after."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from proftab import _heap
from tests.conftest import BUNDLED, ROOT


def test_blocks_nest_and_threads_leave_nothing_active() -> None:
    def work() -> None:
        with _heap.reuse_heap(), _heap.reuse_heap():
            pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    with _heap.reuse_heap():
        pass
    for t in threads:
        t.join()
    assert _heap._active == 0


def test_an_error_inside_restores() -> None:
    with pytest.raises(RuntimeError, match="boom"), _heap.reuse_heap():
        msg = "boom"
        raise RuntimeError(msg)
    assert _heap._active == 0


def test_a_users_malloc_setting_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "4194304")
    assert not _heap._applies()
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "4194304")
    assert not _heap._applies()


def test_freed_heap_goes_back_after_the_block() -> None:
    """Memory freed inside the block is returned on leaving it (malloc_trim): no lasting growth."""
    code = f"""
import proftab as pt, numpy as np
from proftab import _heap
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096
tr = pt.load({str(BUNDLED / 'train_cnn.pt.trace.json.gz')!r})
before = rss()
with _heap.reuse_heap():
    for _ in range(5):
        a = np.ones(3 << 20, np.int64); del a   # 24 MiB each, from the heap while the block lasts
print(int(rss() - before < 8 << 20 or not _heap._applies()))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "1"
