"""Two tensor-parallel ranks of one SGLang engine with kvpilot as their L3.

Each rank is a process of its own (tests/sglang_support.py ``run_ranks``)
running SGLang 0.5.23's ``UnifiedRadixCache`` and ``HybridCacheController``
(its unified radix cache test kit, on CPU through tests/sglang_cpu.py), the
processes one gloo group, as SGLang's cache controller syncs storage hits on
gloo groups: SGLang's own collectives reduce every rank's storage hit to the
smallest (``_sync_prefetch_hit_query``) and every rank's loaded prefix to
the smallest (``_reduce_prefetch_ack``); the ranks run the same steps in
step, as SGLang's scheduler ranks do. Nothing of kvpilot is replaced.

Run by ``make test-sglang``; skipped without SGLang.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here: make test-sglang runs this")

from sglang_support import run_ranks, seq

from kvpilot import ControlClient
from kvpilot import directives as d

PAGE = 16
GEOMETRY = {"page_size": PAGE, "layers": 2, "heads": 2, "head_dim": 8, "kv_size": 512}
MLA = {"kv_lora_rank": 16, "rope_dim": 8}
TP = 2


@pytest.fixture
def sockets() -> Iterator[Callable[..., str]]:
    """``link(rank_host, ...)``: a socket template ``.../kvp-{tp_rank}.sock``
    whose rank r names the r-th host's engine socket, as an operator points
    each rank at a host of its own.
    """
    # A short directory: Unix socket paths are limited to 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="kvp-tp-"))

    def link(*hosts: Any) -> str:
        for rank, h in enumerate(hosts):
            (root / f"kvp-{rank}.sock").symlink_to(h.engine_socket)
        return str(root / "kvp-{tp_rank}.sock")

    yield link
    shutil.rmtree(root, ignore_errors=True)


def _block_hashes(host: Any, s: dict[str, Any]) -> list[int]:
    out = subprocess.run(
        [host.binary, "hash", "--block-size", str(PAGE), *map(str, s["tokens"])],
        capture_output=True,
        text=True,
        check=True,
    )
    return [int(h) for h in json.loads(out.stdout)["sequence"]]


def test_kv_ranks_on_hosts_of_their_own_take_the_smallest_hit(
    kvpilot_host_factory: Callable[..., Any], sockets: Callable[..., str]
) -> None:
    """Two K/V ranks, each with its own slice of the heads on a host of its
    own. A page one rank's host holds and the other's lost is a miss on both
    ranks after SGLang's MIN reduction: both load the same two pages of
    three, each its own heads bit for bit, never rank 0 three and rank 1 two.
    """
    hosts = [kvpilot_host_factory(), kvpilot_host_factory()]
    run = {"socket": sockets(*hosts), **GEOMETRY}
    lost, kept = seq("lost", 60_000, 3, PAGE), seq("kept", 70_000, 3, PAGE)
    produced = run_ranks({**run, "stages": [{"role": "produce", "seqs": [lost, kept]}]}, TP)
    for rank, (out,) in enumerate(produced):
        assert out["counters"]["stored_pages"] == 6, (rank, out)

    # Rank 1's host loses the third page of "lost"; rank 0's keeps it.
    with ControlClient(hosts[1].control_socket) as ctl:
        r = ctl.apply([d.prune(_block_hashes(hosts[1], lost)[1])])
        assert r.ok and r.results[0].effect.blocks == 1, r

    stage = {"role": "consume", "seqs": [lost, kept], "trace": True}
    consumed = run_ranks({**run, "stages": [stage]}, TP)
    answers = []
    for rank, (out,) in enumerate(consumed):
        res = out["results"]
        assert res["kept"]["hit_pages"] == 3 and res["kept"]["wrong_bytes"] == 0, (rank, res)
        assert res["lost"]["hit_pages"] == 2 and res["lost"]["wrong_bytes"] == 0, (rank, res)
        # Each rank read only the pages every rank holds.
        assert res["lost"]["calls"]["got_pages"] == 2, (rank, res)
        answers.append(res["lost"]["calls"]["hit_pages"])
    # What each rank's host answered before SGLang reduced it.
    assert answers == [3, 2]


def test_mla_ranks_share_one_registration_and_the_writers_pages(
    kvpilot_host: Any, sockets: Callable[..., str]
) -> None:
    """Two ranks of an MLA engine: SGLang writes its replicated latent rows
    from rank 0 only (is_storage_writer), so both ranks join one
    registration on one host (the socket's ``{tp_rank}`` is the writer's:
    only ``kvp-0.sock`` exists) and rank 1 never writes. The writer's pages
    are hits on both ranks, bit for bit, in a fresh engine.

    Every rank answers a lookup alike: from the tokens SGLang looked up,
    which every rank saw. A next turn chained from a turn the engine looked
    up is a hit on both ranks; one chained from tokens the engine generated
    itself (which only the writer saw, in its backups) is a miss on both,
    rather than the writer's hit cut to rank 1's miss by the reduction.
    """
    run = {"socket": sockets(kvpilot_host), **GEOMETRY, "mla": MLA}
    first = seq("first", 80_000, 3, PAGE)
    decoded_next = seq("decoded+", 90_000, 5, PAGE)
    looked_up_next = seq("looked-up+", 100_000, 5, PAGE)
    decoded = {**decoded_next, "name": "decoded", "tokens": decoded_next["tokens"][: 3 * PAGE]}
    looked_up = {
        **looked_up_next,
        "name": "looked-up",
        "tokens": looked_up_next["tokens"][: 3 * PAGE],
    }
    stages = [
        {"role": "produce", "seqs": [first, decoded_next, looked_up_next]},
        # A fresh engine: one turn it generated, one it looked up, then the
        # next turn of each, looked up after what its tree holds.
        {
            "role": "consume",
            "trace": True,
            "seqs": [
                {**decoded, "role": "produce", "decoded": True},
                {**decoded_next, "anchored": True},
                looked_up,
                {**looked_up_next, "anchored": True},
            ],
        },
        # Another fresh engine: every page the writer stored, on both ranks.
        {"role": "consume", "seqs": [first, decoded_next, looked_up_next], "trace": True},
    ]
    ranks = run_ranks({**run, "stages": stages}, TP)
    writer, other = ranks[0][0]["counters"], ranks[1][0]["counters"]
    assert writer["stored_pages"] == 13 and writer["set_pages"] == 13, writer
    assert other["stored_pages"] == 0 and other["set_pages"] == 0, other
    log = kvpilot_host.log_tail(400)
    assert "joined its registration" in log and "mla-tp2" in log, log

    for rank, (_, turns, fresh) in enumerate(ranks):
        res = turns["results"]
        # The generated turn's next: its own pages stay, nothing more.
        assert res["decoded+"]["hit_pages"] == 3, (rank, res)
        assert res["decoded+"]["calls"]["hit_pages"] == 0, (rank, res)
        assert res["looked-up"]["hit_pages"] == 3, (rank, res)
        assert res["looked-up"]["wrong_bytes"] == 0, (rank, res)
        assert res["looked-up+"]["hit_pages"] == 5, (rank, res)
        assert res["looked-up+"]["wrong_bytes"] == 0, (rank, res)
        assert res["looked-up+"]["calls"]["hit_pages"] == 2, (rank, res)

        res = fresh["results"]
        for s, pages in ((first, 3), (decoded_next, 5), (looked_up_next, 5)):
            r = res[s["name"]]
            assert r["hit_pages"] == pages and r["wrong_bytes"] == 0, (rank, s["name"], r)
            assert r["calls"]["hit_pages"] == pages, (rank, s["name"], r)
        assert fresh["counters"]["set_pages"] == 0, (rank, fresh)
