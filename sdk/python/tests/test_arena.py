"""kvpilot.arena on a real memfd, without a host: views, pages, lifetime."""

from __future__ import annotations

import os

import numpy as np
import pytest

from kvpilot.arena import Arena, ArenaError
from kvpilot.layout import LAYER_MAJOR, PAGE_MAJOR, Buffer, Layout

LAY = Layout("m", 4, "fp32", 2, [Buffer("k", 2, 3), Buffer("v", 1, 5)])
SLOTS = 3


def make(arrangement: str, size: int | None = None) -> Arena:
    a = Arena(
        tier="host",
        kind="memfd",
        slots=SLOTS,
        arrangement=arrangement,
        size_bytes=SLOTS * LAY.page_bytes(),
        layout=LAY,
    )
    fd = os.memfd_create("kvpilot-test")
    try:
        os.ftruncate(fd, SLOTS * LAY.page_bytes() if size is None else size)
        a.map_fd(fd)
    finally:
        os.close(fd)
    return a


@pytest.mark.parametrize("arr", [PAGE_MAJOR, LAYER_MAJOR])
def test_pages_round_trip_in_canonical_order(arr) -> None:
    a = make(arr)
    page = np.random.default_rng(1).integers(0, 256, LAY.page_bytes(), dtype=np.uint8)
    a.write_page(1, page.tobytes())
    assert a.read_page(1) == page.tobytes()
    # Canonical order: layer 1, buffer 1 is the page's last segment.
    tail = page[LAY.page_segment_offset(1, 1) :]
    assert (a.segment(1, 1, 1) == tail).all()
    rows = a.rows(1, 1, 1)
    assert rows.shape == (4, 1, 5) and rows.dtype == np.float32
    assert rows.tobytes() == tail.tobytes()
    out = bytearray(LAY.page_bytes())
    assert a.read_page(1, out) is None and bytes(out) == page.tobytes()
    assert a.read_page(0) == bytes(LAY.page_bytes())
    del rows, tail
    assert a.close()


@pytest.mark.parametrize("arr", [PAGE_MAJOR, LAYER_MAJOR])
def test_torch_tensor_is_a_view(arr) -> None:
    torch = pytest.importorskip(
        "torch", reason="torch is not installed here: pip install 'kvpilot[torch]', or make py-env"
    )
    a = make(arr)
    for layer in range(2):
        for buf, b in enumerate(LAY.buffers):
            t = a.tensor(layer, buf)
            assert t.shape == (SLOTS, 4, b.heads, b.head_dim) and t.dtype == torch.float32
            t[2, 3] = layer * 10 + buf + 0.5
            assert (a.rows(2, layer, buf)[3] == layer * 10 + buf + 0.5).all()
            assert (a.rows(1, layer, buf) == 0).all()


def test_checks_and_lifetime() -> None:
    with pytest.raises(ArenaError, match="descriptor is 7 bytes"):
        make(PAGE_MAJOR, size=7)
    with pytest.raises(ArenaError, match="unknown arrangement"):
        Arena(tier="host", kind="memfd", slots=1, arrangement="diagonal", size_bytes=1, layout=LAY)
    a = make(PAGE_MAJOR)
    with pytest.raises(ArenaError, match="slot 3 outside"):
        a.segment(3, 0, 0)
    with pytest.raises(ArenaError, match="layer 2 buffer 0"):
        a.segment(0, 2, 0)
    with pytest.raises(ArenaError, match="row 4 outside"):
        a.row(0, 0, 0, 4)
    with pytest.raises(ArenaError, match="not one page"):
        a.write_page(0, b"short")
    view = a.segment(0, 0, 0)
    view[:] = 9
    # A live view keeps the memory: close cannot unmap yet, the view stays valid.
    assert a.close() is False and not a.mapped
    assert (view == 9).all()
    with pytest.raises(ArenaError, match="not mapped"):
        a.numpy()
