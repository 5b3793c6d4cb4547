"""TorchEngine: a transformers model serving requests from kvpilot's arena.

The engine registers its model's KV layout and RoPE config with a kvpilot
host in arena mode and computes in the device arena the host maps into it
(a memfd, zero-copy). A request (``prefill``) follows the engine protocol:

1. ``match`` the prompt: the host hands over the cached prefix's pages;
2. ``allocate`` pages for the rest of the prompt (and generated tokens);
3. run only the uncached suffix through the model, attending to the cached
   pages, writing the new rows into the allocated pages;
4. ``commit`` the full pages written, then ``finish``.

A fully cached prompt still needs its last position's logits: that token is
recomputed against the rows before it and nothing is written. The whole
request runs under ``EngineClient.run_request``, so a host restart in the
middle of it runs it again from its match.

Fill orders (splice replacements, and the kept tokens a splice recomputes,
kvpilot.torchengine.staleness) are served on a background thread by
``FillServer(engine).start()`` (kvpilot.torchengine.fills, which imports this
module, never the reverse). Model work is serialised by one lock, so
requests from several threads and fills never interleave their forward
passes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kvpilot.arena import Arena
from kvpilot.engine import ChatMessage, EngineClient, Usage
from kvpilot.layout import Layout
from kvpilot.torchengine.forward import DEFAULT_CHUNK, PagedModel
from kvpilot.torchengine.models import TinyModel
from kvpilot.torchengine.paging import Rows, gather
from kvpilot.torchengine.rope import rope_config

log = logging.getLogger("kvpilot.torchengine")


@dataclass
class PrefillResult:
    """One request's outcome.

    Attributes:
        request_id: the host's id of the request.
        logits: fp32 logits of the prompt's last position.
        generated: the greedy tokens (``generate`` of them).
        prompt_tokens: the prompt's length.
        cached_tokens: tokens whose K/V came from kvpilot.
        prefilled_tokens: prompt tokens run through the model (the last
            token of a fully cached prompt counts: it was recomputed).
        ttft_ms: wall time from match to the first token's logits.
        match_ms: of which the match (load-back included).
        loaded_pages: pages the host loaded back from colder tiers.
        committed_pages: full pages committed (prompt and generated).
        retried: the request ran more than once (a host restart).
    """

    request_id: str
    logits: torch.Tensor
    generated: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefilled_tokens: int = 0
    ttft_ms: float = 0.0
    match_ms: float = 0.0
    loaded_pages: int = 0
    committed_pages: int = 0
    retried: bool = False


class TorchEngine:
    """A TinyModel registered with a kvpilot host (arena mode).

    Args:
        tm: the model.
        socket: the host's engine socket.
        page_size: tokens per page (the registration's).
        engine_id: the name in the host's logs.
        reset_cache: forget what the host cached at registration.
        timeout: seconds each protocol call may take.
        chunk: tokens per chunk of a long prefill.
        model_name: the layout's model name (default from the model's name
            and seed; engines with equal names share cached pages).
        layout: registers this layout instead of the model's own (tests
            use it to declare a pairing other than the one stored).
    """

    def __init__(
        self,
        tm: TinyModel,
        socket: str,
        *,
        page_size: int = 16,
        engine_id: str = "torchengine",
        reset_cache: bool = False,
        timeout: float = 30.0,
        chunk: int = DEFAULT_CHUNK,
        model_name: str = "",
        layout: Layout | None = None,
    ) -> None:
        self.tm = tm
        self.layout = layout or tm.layout(page_size, model_name)
        self.rope = rope_config(tm.config)
        self.paged = PagedModel(tm, chunk=chunk)
        self.compute = threading.Lock()
        self.client = EngineClient(
            socket,
            self.layout,
            self.rope,
            engine_id=engine_id,
            mode="arena",
            reset_cache=reset_cache,
            timeout=timeout,
            on_reregister=self._reregistered,
            # Sparse fill orders and the staleness ranking (FillServer).
            recompute=True,
        )
        log.info(
            "registered %s: %d layers, page size %d, %s, rope %s (registration %s)",
            self.layout.model,
            self.layout.layers,
            page_size,
            self.layout.dtype,
            self.rope,
            self.client.registration.id,
        )

    @property
    def page_size(self) -> int:
        """Tokens per page."""
        return self.layout.page_size

    def _reregistered(self, reg: Any) -> None:
        # Nothing to drop: the engine keeps no slots between requests.
        log.info("host restarted; registered again (%s)", reg.id)

    def close(self) -> None:
        """Closes the client (ends the fill stream, unmaps the arenas)."""
        self.client.close()

    def __enter__(self) -> TorchEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- requests

    def prefill(
        self,
        tokens: Sequence[int],
        *,
        session: str = "",
        tenant: str = "",
        messages: Sequence[ChatMessage | dict[str, Any]] | None = None,
        generate: int = 0,
        cache_control: Any = None,
        commit: bool = True,
    ) -> PrefillResult:
        """Runs one request (see the module doc) and returns its logits and
        ``generate`` greedy tokens. A host restart during it runs it again.

        ``commit`` False computes without committing (the pages it wrote are
        freed at finish): a request that must leave the cache as it was.
        """
        toks = [int(t) for t in tokens]
        if not toks:
            raise ValueError("empty prompt")
        attempts = 0

        def run(c: EngineClient) -> PrefillResult:
            nonlocal attempts
            attempts += 1
            return self._request(
                c, toks, session, tenant, messages, generate, cache_control, commit
            )

        res = self.client.run_request(run)
        res.retried = attempts > 1
        return res

    def _request(
        self,
        c: EngineClient,
        toks: list[int],
        session: str,
        tenant: str,
        messages: Sequence[ChatMessage | dict[str, Any]] | None,
        generate: int,
        cache_control: Any,
        commit: bool,
    ) -> PrefillResult:
        ps = self.page_size
        t0 = time.perf_counter()
        m = c.match(toks, session=session, tenant=tenant, messages=messages)
        match_ms = (time.perf_counter() - t0) * 1e3
        finished = False
        try:
            dev = c.device
            cached = m.cached_tokens
            # Positions whose rows get written: the prompt and every generated
            # token but the last (decode writes a token's rows when it runs).
            seq_len = len(toks) + max(generate - 1, 0)
            need = -(-seq_len // ps) - len(m.page_slots)
            slots = list(m.page_slots)
            if need > 0:
                slots += c.allocate(m.request_id, need).page_slots
            with self.compute:
                first, prefilled = self._prompt(dev, toks, slots, cached)
                ttft = (time.perf_counter() - t0) * 1e3
                out = self._decode(dev, toks, slots, first, generate)
            seq = toks + out[:-1]
            # Commit the full pages this request wrote (rows before `cached`
            # are the host's own pages; committing them again is harmless).
            full = len(seq) // ps if commit else 0
            if full > 0:
                c.commit(m.request_id, seq, slots[:full])
            c.finish(
                m.request_id,
                usage=Usage(input_tokens=len(toks), cached_tokens=cached, output_tokens=len(out)),
                cache_control=cache_control,
            )
            finished = True
        finally:
            if not finished:
                try:
                    c.release(m.request_id)
                except Exception as e:  # the request failed already; say why release did too
                    log.debug("release %s after a failed request: %s", m.request_id, e)
        return PrefillResult(
            request_id=m.request_id,
            logits=first,
            generated=out,
            prompt_tokens=len(toks),
            cached_tokens=cached,
            prefilled_tokens=prefilled,
            ttft_ms=ttft,
            match_ms=match_ms,
            loaded_pages=m.loaded_pages,
            committed_pages=full,
        )

    def _prompt(
        self, dev: Arena, toks: list[int], slots: list[int], cached: int
    ) -> tuple[torch.Tensor, int]:
        """Runs the uncached part of the prompt; returns the last position's
        logits and how many tokens ran.
        """
        ps = self.page_size
        if cached >= len(toks):
            # Fully cached: recompute the last token, write nothing.
            ctx = Rows.span(slots, ps, 0, len(toks) - 1)
            logits = self.paged.forward(toks[-1:], len(toks) - 1, dev, ctx, None)
            n = 1
        else:
            ctx = Rows.span(slots, ps, 0, cached)
            dest = Rows.span(slots, ps, cached, len(toks) - cached)
            logits = self.paged.forward(toks[cached:], cached, dev, ctx, dest)
            n = len(toks) - cached
        assert logits is not None
        return logits, n

    def _decode(
        self, dev: Arena, toks: list[int], slots: list[int], logits: torch.Tensor, steps: int
    ) -> list[int]:
        """Greedy decoding of ``steps`` tokens after the prompt; every token
        but the last runs (its rows are written after the prompt's).
        """
        ps = self.page_size
        out: list[int] = []
        for step in range(steps):
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            if step == steps - 1:
                break
            pos = len(toks) + step
            ctx, dest = Rows.span(slots, ps, 0, pos), Rows.span(slots, ps, pos, 1)
            step_logits = self.paged.forward([nxt], pos, dev, ctx, dest)
            assert step_logits is not None
            logits = step_logits
        return out

    # ----------------------------------------------------------------- reading

    def read_rows(
        self, slots: Sequence[int], count: int, layer: int = 0
    ) -> tuple[torch.Tensor, ...]:
        """Copies of the first ``count`` rows of pages ``slots`` of ``layer``,
        one ``[count, heads, head_dim]`` tensor per buffer (K and V, or MLA's
        fused row), in the layout's dtype.
        """
        rows = Rows.span(slots, self.page_size, 0, count)
        with self.compute:
            return tuple(
                t.clone() for t in gather(self.client.device, layer, len(self.layout.buffers), rows)
            )

    def read_cached(
        self, tokens: Sequence[int], *, tenant: str = "", layer: int = 0
    ) -> tuple[int, tuple[torch.Tensor, ...]]:
        """What kvpilot caches for ``tokens``: the number of cached tokens and
        copies of their rows of ``layer`` (per buffer).

        It matches without a session (so no session's state changes), reads
        the locked pages and releases them.
        """
        c = self.client
        m = c.match(list(tokens), tenant=tenant)
        try:
            return m.cached_tokens, self.read_rows(m.page_slots, m.cached_tokens, layer)
        finally:
            c.release(m.request_id)

    def cached_tokens(self, tokens: Sequence[int], *, tenant: str = "") -> int:
        """How many leading tokens of ``tokens`` kvpilot has on the device."""
        c = self.client
        m = c.match(list(tokens), tenant=tenant)
        c.release(m.request_id)
        return m.cached_tokens

    def wait_cached(
        self, tokens: Sequence[int], want: int, *, tenant: str = "", timeout: float = 20.0
    ) -> int:
        """Polls until at least ``want`` leading tokens are cached (a
        splice's branch is committed in the background after its fills);
        returns the count, which is below ``want`` after ``timeout``.
        """
        deadline = time.monotonic() + timeout
        # Each poll is a match on the host; the fills it waits for often run
        # in this process (a FillServer), where a tight loop takes their CPU.
        pause = 0.002
        while True:
            n = self.cached_tokens(tokens, tenant=tenant)
            if n >= want or time.monotonic() > deadline:
                return n
            time.sleep(pause)
            pause = min(0.025, 2 * pause)
