"""The worker's background save queue: saves run behind the forward, in order.

One thread runs the saves (kvpilot.vllm.saver says what a save does and
why running it behind the forward is safe); the queue is bounded in pages,
lets a preempted request's saves be cancelled without waiting for the
queue, and reports each save once as done.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from kvpilot.vllm.metadata import PageSave


class SaveCancelled(Exception):
    """The save's request was preempted before its pages were copied."""


@dataclass
class SaveJob:
    """One background save; ``run`` does it, entering ``copy_region()``
    around the copy out of vLLM's blocks.
    """

    save: PageSave
    run: Callable[[SaveJob], None]
    cancelled: bool = False
    copying: bool = False
    _queue: SaveQueue | None = field(default=None, repr=False)

    @contextmanager
    def copy_region(self) -> Iterator[None]:
        """Marks the copy out of vLLM's blocks; raises SaveCancelled when
        the request was preempted (its blocks are no longer its own).
        """
        q = self._queue
        assert q is not None
        with q._cv:
            if self.cancelled:
                raise SaveCancelled(self.save.req_id)
            self.copying = True
        try:
            yield
        finally:
            with q._cv:
                self.copying = False
                q._cv.notify_all()


class SaveQueue:
    """Background saves in order, bounded in pages.

    Bookkeeping steps (``then``) run in the same order without counting
    against the bound. ``take_done()`` reports each background save once,
    by kvpilot request id, whatever its outcome.
    """

    def __init__(
        self,
        max_pages: int,
        log: logging.Logger,
        name: str = "kvpilot-saves",
        on_start: Callable[[], None] | None = None,
    ) -> None:
        self.max_pages = max_pages
        self.log = log
        self.name = name
        #: Runs first on the save thread (its own settings, e.g. threads).
        self.on_start = on_start
        self._cv = threading.Condition()
        self._jobs: deque[SaveJob | Callable[[], None]] = deque()
        self._queued_pages = 0
        self._running: SaveJob | None = None
        # A step (``then``) is running: drain waits for it too, or a
        # Finish could still be on the wire when drain returns.
        self._stepping = False
        self._pending: dict[str, int] = {}
        self._done: dict[str, int] = {}
        self._closed = False
        self._completed = 0
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------- producer

    def submit(self, save: PageSave, run: Callable[[SaveJob], None], wait_s: float = 0.0) -> bool:
        """Queues a save; False when the queue stays full for wait_s (the
        save is then the caller's to count as skipped). A save always fits
        an empty queue, however large.
        """
        job = SaveJob(save, run, _queue=self)
        deadline = time.monotonic() + wait_s
        with self._cv:
            while (
                not self._closed
                and self._queued_pages > 0
                and self._queued_pages + save.pages > self.max_pages
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            if self._closed:
                return False
            self._jobs.append(job)
            self._queued_pages += save.pages
            self._pending[save.req_id] = self._pending.get(save.req_id, 0) + 1
            self._start_locked()
            self._cv.notify_all()
        return True

    def then(self, step: Callable[[], None]) -> None:
        """Runs step on the save thread after every save queued so far."""
        with self._cv:
            if self._closed:
                return
            self._jobs.append(step)
            self._start_locked()
            self._cv.notify_all()

    def stop(self, req_ids: set[str]) -> None:
        """Cancels the queued saves of req_ids and waits until none of their
        pages is being copied. Saves past their copy (committing) go on.
        """
        if not req_ids:
            return
        with self._cv:
            for j in self._jobs:
                if isinstance(j, SaveJob) and j.save.req_id in req_ids:
                    j.cancelled = True
            run = self._running
            if run is not None and run.save.req_id in req_ids:
                run.cancelled = True
                while run.copying:
                    self._cv.wait()

    def pending(self, req_id: str) -> int:
        """Saves of req_id queued or running."""
        with self._cv:
            return self._pending.get(req_id, 0)

    def take_done(self) -> dict[str, int]:
        """Saves finished since the last call, by kvpilot request id."""
        with self._cv:
            out, self._done = self._done, {}
            return out

    def wait_progress(self, timeout: float) -> None:
        """Waits until a save finishes or timeout passes (at once when none
        is queued).
        """
        deadline = time.monotonic() + timeout
        with self._cv:
            seen = self._completed
            while self._completed == seen and (self._jobs or self._running is not None):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cv.wait(left)

    def drain(self, timeout: float) -> bool:
        """Waits until every queued save and step ran; False at timeout."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._jobs or self._running is not None or self._stepping:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def close(self, timeout: float = 5.0) -> None:
        """Lets queued saves finish for up to timeout, then stops the thread."""
        self.drain(timeout)
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    # ------------------------------------------------------------- consumer

    def _start_locked(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        if self.on_start is not None:
            try:
                self.on_start()
            except Exception:
                self.log.exception("kvpilot connector: setting up the save thread failed")
        while True:
            with self._cv:
                while not self._jobs and not self._closed:
                    self._cv.wait()
                if not self._jobs:
                    return
                item = self._jobs.popleft()
                if isinstance(item, SaveJob):
                    self._running = item
                else:
                    self._stepping = True
            if isinstance(item, SaveJob):
                self._run(item)
            else:
                try:
                    item()
                except Exception:
                    self.log.exception("kvpilot connector: a save queue step failed")
                with self._cv:
                    self._stepping = False
                    self._cv.notify_all()

    def _run(self, job: SaveJob) -> None:
        try:
            job.run(job)
        except SaveCancelled:
            pass
        except Exception:
            self.log.exception("kvpilot connector: a background save failed")
        finally:
            sv = job.save
            with self._cv:
                self._running = None
                self._queued_pages -= sv.pages
                left = self._pending.get(sv.req_id, 0) - 1
                if left > 0:
                    self._pending[sv.req_id] = left
                else:
                    self._pending.pop(sv.req_id, None)
                self._done[sv.kv_request_id] = self._done.get(sv.kv_request_id, 0) + 1
                self._completed += 1
                self._cv.notify_all()
