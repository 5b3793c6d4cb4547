"""kvpilot's tiers in vLLM's own KV events: one event stream per vLLM worker.

A router that scores workers by the KV they hold (Dynamo's) listens to each
vLLM worker's KV events (``--kv-events-config``: vLLM's ZMQ publisher, which
Dynamo's ``KvEventPublisher`` relays). With the connector, a worker can also
load what kvpilot holds for it, so the scheduler-side connector adds
kvpilot's pages to that stream through vLLM's ``take_events`` hook: a
``BlockStored`` when kvpilot stores a page on a tier, a ``BlockRemoved``
when it drops it, with the medium Dynamo scores at that tier's weight:

    kvpilot tier   vLLM medium   Dynamo tier (ai-dynamo 1.6.1)
    host           CPU           host_pinned
    disk, remote   STORAGE       disk

vLLM's own blocks stay in the stream as vLLM publishes them (medium GPU);
kvpilot's staging tier is never announced. So a prefix vLLM evicted but
kvpilot holds still scores the worker, at the lower tier's weight, and the
router hears one publisher per worker (kvpilot's host then publishes
nothing for connector-mode engines; its own publisher serves arena-mode
engines).

Where the pages come from: the host's event stream (the Control socket's
WatchEvents) says which page, by kvpilot's block hash, entered or left which
tier; the tokens a stored event must carry come from this engine's own
requests (the block hashes of its matches and of its workers' commits). A
page of a prefix this engine never handled is not announced; a stored event
that arrives before its tokens are known waits for them (bounded). Block
hashes are kvpilot's, in their own namespace per tier; a stored page names
its parent, so Dynamo chains a prefix's pages.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

#: vLLM's medium for each kvpilot tier (the host's event tier names).
MEDIUM = {"host_pinned": "CPU", "disk": "STORAGE", "external": "STORAGE"}

#: Pages whose tokens are remembered (about 300 bytes each at 32 tokens).
MAX_PAGES = 65_536
#: Stored events waiting for their tokens.
MAX_PENDING = 8_192

_RETRY_S = (0.5, 30.0)


class Pages:
    """kvpilot block hash -> (parent hash, the page's tokens), bounded LRU."""

    def __init__(self, limit: int = MAX_PAGES) -> None:
        self.limit = limit
        self._pages: OrderedDict[int, tuple[int | None, tuple[int, ...]]] = OrderedDict()

    def learn(self, tokens: Sequence[int], hashes: Sequence[int], page: int) -> list[int]:
        """Records the pages of a prompt whose sequence hashes are hashes
        (root first); returns the hashes new to it.
        """
        new = []
        parent: int | None = None
        for i, h in enumerate(hashes):
            chunk = tuple(tokens[i * page : (i + 1) * page])
            if len(chunk) < page:
                break
            if h not in self._pages:
                new.append(h)
            self._pages[h] = (parent, chunk)
            self._pages.move_to_end(h)
            parent = h
        while len(self._pages) > self.limit:
            self._pages.popitem(last=False)
        return new

    def get(self, h: int) -> tuple[int | None, tuple[int, ...]] | None:
        return self._pages.get(h)


class EngineEvents:
    """The scheduler side's share of vLLM's KV event stream.

    ``learn`` is called from the scheduler thread with what the engine's
    requests revealed; the host's events arrive on a thread of their own
    (``start``); ``take`` hands vLLM the events made since the last call.
    """

    def __init__(
        self,
        page: int,
        log: logging.Logger,
        watch: Callable[[threading.Event], Iterator[Any]] | None = None,
    ) -> None:
        self.page = page
        self.log = log
        self._watch = watch
        self._lock = threading.Lock()
        self._pages = Pages()
        # (medium, hash) announced, by medium.
        self._announced: dict[str, set[int]] = {m: set() for m in set(MEDIUM.values())}
        # hash -> the media of stored events waiting for its tokens.
        self._pending: OrderedDict[int, list[str]] = OrderedDict()
        self._out: deque[Any] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Events since start: announced stores and removals, and stores
        #: dropped because their tokens never became known.
        self.counters = {"stored": 0, "removed": 0, "unknown": 0}

    # ------------------------------------------------------------- inputs

    def learn(self, tokens: Sequence[int], hashes: Sequence[int]) -> None:
        """A request revealed the block hashes of its prompt's pages."""
        with self._lock:
            new = self._pages.learn(tokens, hashes, self.page)
            for h in new:
                for medium in self._pending.pop(h, ()):
                    self._store_locked(medium, [h])

    def host_event(self, ev: Any) -> None:
        """One event of the host's stream (kvpilot.control.KVEvent)."""
        medium = MEDIUM.get(ev.storage_tier)
        if medium is None:
            return
        with self._lock:
            if ev.kind == "stored":
                self._store_locked(medium, [b for b, _ in ev.blocks])
            elif ev.kind == "removed":
                self._remove_locked(medium, ev.block_hashes)
            else:  # cleared: everything this tier held
                self._remove_locked(medium, list(self._announced[medium]))

    def forget_all(self) -> None:
        """The host's stream broke (the host restarted): what it held may be
        gone, so every page announced is withdrawn; pages come back as the
        host stores them again.
        """
        with self._lock:
            for medium, hashes in self._announced.items():
                self._remove_locked(medium, list(hashes))
            self._pending.clear()

    # ------------------------------------------------------------- output

    def take(self) -> list[Any]:
        """The vLLM KV cache events made since the last call."""
        with self._lock:
            out = list(self._out)
            self._out.clear()
        return out

    # -------------------------------------------------------------- watch

    def start(self) -> None:
        """Follows the host's event stream on a thread, reconnecting."""
        if self._watch is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="kvpilot-events", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        assert self._watch is not None
        wait = _RETRY_S[0]
        warned = False
        while not self._stop.is_set():
            ready = threading.Event()
            try:
                for ev in self._watch(ready):
                    if self._stop.is_set():
                        return
                    wait = _RETRY_S[0]
                    self.host_event(ev)
            except Exception as e:
                if not warned:
                    self.log.warning(
                        "kvpilot connector (scheduler): the host's event stream failed (%s); "
                        "kvpilot's pages are withdrawn from vLLM's KV events until it is back",
                        e,
                    )
                    warned = True
            else:
                warned = False
            if ready.is_set():
                self.forget_all()
            self._stop.wait(wait)
            wait = min(wait * 2, _RETRY_S[1])

    # ------------------------------------------------------------ helpers

    def _store_locked(self, medium: str, hashes: Sequence[int]) -> None:
        from vllm.distributed.kv_events import BlockStored

        seen = self._announced[medium]
        for h in hashes:
            if h in seen:
                continue
            page = self._pages.get(h)
            if page is None:
                self._park_locked(h, medium)
                continue
            parent, tokens = page
            self._out.append(
                BlockStored(
                    block_hashes=[h],
                    parent_block_hash=parent,
                    token_ids=list(tokens),
                    block_size=self.page,
                    lora_id=None,
                    medium=medium,
                    lora_name=None,
                )
            )
            seen.add(h)
            self.counters["stored"] += 1

    def _remove_locked(self, medium: str, hashes: Sequence[int]) -> None:
        from vllm.distributed.kv_events import BlockRemoved

        seen = self._announced[medium]
        gone: list[bytes | int] = [h for h in hashes if h in seen]
        for h in hashes:
            waiting = self._pending.get(h)
            if waiting and medium in waiting:
                waiting.remove(medium)
        if not gone:
            return
        seen.difference_update(gone)
        self._out.append(BlockRemoved(block_hashes=gone, medium=medium))
        self.counters["removed"] += len(gone)

    def _park_locked(self, h: int, medium: str) -> None:
        waiting = self._pending.setdefault(h, [])
        if medium not in waiting:
            waiting.append(medium)
        self._pending.move_to_end(h)
        while len(self._pending) > MAX_PENDING:
            self._pending.popitem(last=False)
            self.counters["unknown"] += 1


def watch_host(control_socket: str) -> Callable[[threading.Event], Iterator[Any]]:
    """A watch function over the host's Control socket (kvpilot tiers only)."""

    def watch(ready: threading.Event) -> Iterator[Any]:
        from kvpilot.control import ControlClient

        with ControlClient(control_socket) as ctl:
            yield from ctl.watch_events(["host", "disk", "remote"], ready=ready)

    return watch
