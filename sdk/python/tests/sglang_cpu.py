"""What SGLang's cache code needs to run on a machine without a GPU.

SGLang 0.5.23's radix cache, HiCache controller, host pools, storage threads
and backend loading are plain Python and torch and run on CPU as they are.
Three things do not, and a fourth stops them on a small shared machine; only
these are replaced, each for the reason given:

1. ``get_device`` in SGLang's unified radix cache test kit raises without an
   accelerator ("No accelerator ... is available"): the kit's fixtures
   allocate the device pools on ``"cpu"`` instead.
2. Pinned host memory: ``MHATokenToKVPoolHost`` and ``MLATokenToKVPoolHost``
   register their buffer with ``cudaHostRegister``, which needs the NVIDIA
   driver ("Found no NVIDIA driver", "The NVIDIA driver on your system is
   too old"); the pools are built with ``pin_memory=False``, plain host
   memory.
3. The device <-> host copy kernels (``transfer_kv_*``, from sgl_kernel's
   CUDA build; on CPU their names are never imported, "NameError:
   transfer_kv_all_layer_lf_pf"): ``load_to_device_per_layer`` and
   ``backup_from_device_all_layer`` of both pools copy the same rows with
   torch indexing, for every layout the kvpilot backend serves.
4. The host-memory reserve: SGLang refuses any host pool while less than
   ``HICACHE_HOST_MEMORY_RESERVE_BYTES`` (10 GiB) of the machine's memory
   would be left available after it ("Not enough host memory available.
   Requesting 0.00 GB but only have -0.20 GB free"), however small the pool;
   the test pools are kilobytes, so on a 24 GiB machine shared with other
   work the reserve is cut to 256 MiB.

Nothing of kvpilot is replaced. On a machine with a GPU the worker applies
none of this: examples/sglang/gpu-check.sh runs the same tests there with
pinned memory and SGLang's kernels, and SGLang's server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# SGLang's host-memory reserve for the test pools (item 4 above).
_TEST_HOST_RESERVE_BYTES = 256 * 1024**2


def _rows(
    pool: Any, t: torch.Tensor, layer: int
) -> Callable[[torch.Tensor], tuple[torch.Tensor, tuple]]:
    """An indexer from token rows of the host pool to (tensor, index) for
    one layer of its buffer ``t`` (an MHA pool's K or V, an MLA pool's fused
    rows), in the pool's layout.
    """
    ps = pool.page_size
    if pool.layout == "layer_first":
        v = t[layer]
        return lambda idx: (v, (idx,))
    if pool.layout == "page_first":
        v = t[:, layer]
        return lambda idx: (v, (idx,))
    if pool.layout == "page_first_direct":
        v = t[:, layer]
        return lambda idx: (v, (idx // ps, idx % ps))
    if pool.layout == "page_head":
        v = t[:, :, :, layer]
        return lambda idx: (v, (idx // ps, slice(None), idx % ps))
    raise ValueError(f"no CPU copy for layout {pool.layout}")


def _load_to_device_per_layer(
    self: Any,
    device_pool: Any,
    host_indices: torch.Tensor,
    device_indices: torch.Tensor,
    layer_id: int,
    io_backend: str,
    *,
    is_draft: bool = False,
) -> None:
    if not is_draft and not 0 <= layer_id < self.target_layer_num:
        return
    dev = (self.device_k_buffers[layer_id], self.device_v_buffers[layer_id])
    for buf in (0, 1):
        src, ix = _rows(self, self.kv_buffer[buf], layer_id)(host_indices.long())
        dev[buf][device_indices.long()] = src[ix]


def _backup_from_device_all_layer(
    self: Any, device_pool: Any, host_indices: torch.Tensor, device_indices: torch.Tensor, io: str
) -> None:
    for layer_id in range(self.layer_num):
        dev = (self.device_k_buffers[layer_id], self.device_v_buffers[layer_id])
        for buf in (0, 1):
            dst, ix = _rows(self, self.kv_buffer[buf], layer_id)(host_indices.long())
            dst[ix] = dev[buf][device_indices.long()]


def _mla_load_to_device_per_layer(
    self: Any,
    device_pool: Any,
    host_indices: torch.Tensor,
    device_indices: torch.Tensor,
    layer_id: int,
    io_backend: str,
    *,
    is_draft: bool = False,
) -> None:
    # The pool's own map from the controller's layer ids to its buffers.
    if not is_draft and layer_id not in self._target_layer_indices:
        return
    dev = self.device_kv_buffers[self._buffer_index_by_layer[layer_id]]
    src, ix = _rows(self, self.kv_buffer, self._host_layer_by_controller[layer_id])(
        host_indices.long()
    )
    dev[device_indices.long()] = src[ix]


def _mla_backup_from_device_all_layer(
    self: Any, device_pool: Any, host_indices: torch.Tensor, device_indices: torch.Tensor, io: str
) -> None:
    for layer_id, host_layer in self._host_layer_by_controller.items():
        dev = self.device_kv_buffers[self._buffer_index_by_layer[layer_id]]
        dst, ix = _rows(self, self.kv_buffer, host_layer)(host_indices.long())
        dst[ix] = dev[device_indices.long()]


def _unpinned(cls: Any) -> None:
    init = cls.__init__

    def unpinned_init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["pin_memory"] = False
        init(self, *args, **kwargs)

    cls.__init__ = unpinned_init


def install() -> None:
    """Applies the four replacements (idempotent)."""
    from sglang.srt.mem_cache.pool_host import base
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
    from sglang.test.kits.unified_radix_cache import fixtures

    fixtures.get_device = lambda *a, **k: "cpu"
    base.HICACHE_HOST_MEMORY_RESERVE_BYTES = _TEST_HOST_RESERVE_BYTES
    if getattr(MHATokenToKVPoolHost, "_kvpilot_cpu", False):
        return
    _unpinned(MHATokenToKVPoolHost)
    MHATokenToKVPoolHost.load_to_device_per_layer = _load_to_device_per_layer  # type: ignore[method-assign]
    MHATokenToKVPoolHost.backup_from_device_all_layer = _backup_from_device_all_layer  # type: ignore[method-assign]
    MHATokenToKVPoolHost._kvpilot_cpu = True  # type: ignore[attr-defined]
    _unpinned(MLATokenToKVPoolHost)
    MLATokenToKVPoolHost.load_to_device_per_layer = _mla_load_to_device_per_layer  # type: ignore[method-assign]
    MLATokenToKVPoolHost.backup_from_device_all_layer = _mla_backup_from_device_all_layer  # type: ignore[method-assign]
