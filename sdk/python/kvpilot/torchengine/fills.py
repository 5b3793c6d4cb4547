"""The engine's side of fill orders: prefilling splice replacements.

An amortize splice frees a span of a session's cache and shifts the tokens
after it by rotating their keys; the replacement's tokens τ are the only
new work. The host sends it as a fill order: prefill τ at positions
``[position, position + len(τ))``, attending to the prefix (the full pages
in ``prefix_page_slots`` and the first ``first_offset`` rows of
``page_slots[0]``), and write τ's rows into ``page_slots`` from row
``first_offset`` on. The other rows of those pages already hold the moved
downstream tokens and are not touched. The engine answers with
``complete_fill``; the host then commits the new branch.

A sparse order (the engine registered ``recompute``) names the position of
each token, and may carry candidates: kept tokens the splice moved, whose
K/V still reflect the text it removed. ``kvpilot.torchengine.staleness``
chooses among them (a share by the engine's staleness signal, or as many as
the quality guard's budget needs), and one pass of
``PagedModel.recompute`` writes the order's tokens and the chosen ones,
each attending to every row before it.

``FillServer`` runs that loop on a daemon thread until the engine's client
closes, counting what it served.
"""

from __future__ import annotations

import logging
import threading
import time

from kvpilot.engine_types import FillOrder
from kvpilot.torchengine.engine import TorchEngine
from kvpilot.torchengine.paging import Rows
from kvpilot.torchengine.staleness import Recomputed, recompute_order

log = logging.getLogger("kvpilot.torchengine.fills")


class FillServer:
    """Serves an engine's fill orders on a background thread.

    Attributes:
        orders: orders completed successfully.
        tokens: replacement tokens prefilled (counted once the fill ran,
            before the host is told).
        failures: orders answered with an error.
        recomputed: kept tokens recomputed (sparse orders; counted as
            ``tokens``).
        last_error: the last failure's message.
        last_estimate: the quality guard's last estimate of the mean KL per
            token a splice left (0 when the guard did not run).
        busy_ms: wall time spent prefilling.
    """

    def __init__(self, engine: TorchEngine) -> None:
        self.engine = engine
        self.orders = 0
        self.tokens = 0
        self.failures = 0
        self.recomputed = 0
        self.last_error = ""
        self.last_estimate = 0.0
        self.busy_ms = 0.0
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="kvpilot-fills", daemon=True)

    def start(self) -> FillServer:
        """Starts the thread; returns self."""
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        """Waits for the thread (it ends when the engine's client closes)."""
        self._thread.join(timeout)

    def wait(self, orders: int, timeout: float = 20.0) -> bool:
        """Waits until ``orders`` orders were answered (ok or not)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self.orders + self.failures < orders:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def _run(self) -> None:
        c = self.engine.client
        try:
            for o in c.fill_orders():
                err = ""
                done = Recomputed()
                t0 = time.perf_counter()
                try:
                    done = self.fill(o)
                except Exception as e:  # reported to the host, which drops the branch
                    err = f"{type(e).__name__}: {e}"
                    log.warning("fill order %s failed: %s", o.order_id, err)
                ms = (time.perf_counter() - t0) * 1e3
                if not err:
                    # What the engine did is counted before the host hears
                    # of it: whoever sees the pages cached (CompleteFill
                    # makes them so) reads the counts of the order too.
                    with self._cv:
                        self.tokens += len(o.tokens)
                        self.recomputed += done.tokens
                        self.last_estimate = done.estimate
                try:
                    c.complete_fill(
                        o.order_id,
                        ok=not err,
                        error=err,
                        recomputed=done.tokens,
                        estimated_kl=done.estimate,
                    )
                except Exception as e:
                    err = err or f"complete_fill: {e}"
                    log.warning("fill order %s: complete_fill failed: %s", o.order_id, e)
                with self._cv:
                    self.busy_ms += ms
                    if err:
                        self.failures += 1
                        self.last_error = err
                    else:
                        self.orders += 1
                    self._cv.notify_all()
                log.debug(
                    "fill order %s: %d tokens at %d (%s) in %.1f ms",
                    o.order_id,
                    len(o.tokens),
                    o.position,
                    "ok" if not err else "failed",
                    ms,
                )
        except Exception as e:
            if not c.closed:
                log.error("fill order stream ended: %s", e)

    def fill(self, o: FillOrder) -> Recomputed:
        """Prefills one order's tokens into its pages (see the module doc);
        returns what a sparse order recomputed.
        """
        if o.sparse:
            return self._fill_sparse(o)
        e = self.engine
        ps = e.page_size
        if not o.page_slots:
            raise ValueError("no page slots to write")
        prefix = Rows.span(o.prefix_page_slots, ps, 0, len(o.prefix_page_slots) * ps)
        prefix = prefix + Rows.span(o.page_slots[:1], ps, 0, o.first_offset)
        if len(prefix) != o.position:
            raise ValueError(
                f"the prefix holds {len(prefix)} rows ({len(o.prefix_page_slots)} pages + "
                f"{o.first_offset}) but the replacement starts at position {o.position}"
            )
        dest = Rows.span(o.page_slots, ps, o.first_offset, len(o.tokens))
        with e.compute:
            e.paged.forward(o.tokens, o.position, e.client.device, prefix, dest, logits=False)
        return Recomputed()

    def _fill_sparse(self, o: FillOrder) -> Recomputed:
        e = self.engine
        ps = e.page_size
        pages = o.prefix_page_slots + o.page_slots
        seq = Rows.span(pages, ps, 0, len(pages) * ps)
        if o.positions and len(o.positions) != len(o.tokens):
            raise ValueError(f"{len(o.tokens)} tokens but {len(o.positions)} positions")
        if o.positions and o.positions[0] < o.position:
            raise ValueError(f"position {o.positions[0]} is before the order's {o.position}")
        if len(o.prefix_page_slots) * ps > o.position:
            raise ValueError(
                f"{len(o.prefix_page_slots)} prefix pages reach past position {o.position}"
            )
        with e.compute:
            return recompute_order(e.paged, e.client.device, seq, o)
