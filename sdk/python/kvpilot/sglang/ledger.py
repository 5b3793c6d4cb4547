"""Which tokens an SGLang page key names, and which kvpilot tenant owns them.

SGLang names a page of its L3 tier by a chained hash of its tokens
(``get_hash_str``: SHA-256 of the previous page's digest and the page's
tokens; the first page chained from a seed of the request's ``extra_key``
and ``cache_salt``, or from nothing). kvpilot names the same page by its
block identity (xxh3 over the tokens, chained from the root, salted by the
tenant), which is what Dynamo's router hashes. A storage backend is handed
SGLang's keys only, so the backend keeps this ledger: for each key it has
seen a chain of tokens for, the key before it and the page's tokens. The
tokens come from the SGLang operation a call serves (kvpilot.sglang.origin)
and are checked here with SGLang's own hash before they are believed: a
key is entered only when hashing the tokens after its predecessor gives
exactly that key. So the ledger never maps a key to tokens it does not name.

``path(key)`` rebuilds the whole token sequence from the root to a key,
which kvpilot's engine protocol takes: its hashes chain from the root.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from sglang.srt.mem_cache.utils import get_hash_str, storage_namespace_seed

#: Tenant names SGLang namespaces become when they are not a plain salt.
HASHED_TENANT_PREFIX = "sglang-ns-"
_MAX_TENANT = 256
# Namespaces remembered for backups that do not carry theirs.
_NAMESPACES = 64


@dataclass(frozen=True)
class Namespace:
    """A request's ``extra_key`` and ``cache_salt`` (None when unset)."""

    extra_key: str | None = None
    cache_salt: str | None = None

    @property
    def seed(self) -> str | None:
        """SGLang's chain seed for the first page (None: no namespace)."""
        return storage_namespace_seed(self.extra_key, self.cache_salt)

    @property
    def tenant(self) -> str:
        """The kvpilot tenant of this namespace.

        No namespace is the default tenant (""). A ``cache_salt`` alone is
        the tenant of that name, so operators pin and pause for it by the
        name their requests carry. Anything else (an ``extra_key``, a LoRA,
        a salt that is not a plain name) is ``sglang-ns-`` and SGLang's own
        namespace seed: distinct namespaces give distinct tenants, and
        kvpilot salts each tenant's hashes apart, so no tenant's pages ever
        serve another's.
        """
        if self.extra_key is None and self.cache_salt is None:
            return ""
        salt = self.cache_salt
        if (
            self.extra_key is None
            and salt
            and len(salt) <= _MAX_TENANT
            and salt.isprintable()
            and not salt.startswith(HASHED_TENANT_PREFIX)
        ):
            return salt
        return HASHED_TENANT_PREFIX + (self.seed or hashlib.sha256(repr(self).encode()).hexdigest())


@dataclass(frozen=True)
class _Entry:
    parent: str | None
    tokens: tuple[int, ...]
    namespace: Namespace


@dataclass(frozen=True)
class Path:
    """The tokens from the root through a key, and their namespace."""

    tokens: list[int]
    namespace: Namespace

    def pages(self, page_size: int) -> int:
        """Full pages the tokens cover."""
        return len(self.tokens) // page_size


class Ledger:
    """SGLang page keys whose tokens the backend knows, newest kept."""

    def __init__(self, page_size: int, capacity: int) -> None:
        self.page_size = page_size
        self.capacity = capacity
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._namespaces: OrderedDict[Namespace, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def knows(self, key: str) -> bool:
        """Whether key's tokens are known."""
        with self._lock:
            return key in self._entries

    def namespaces(self) -> list[Namespace]:
        """The namespaces of the latest chains entered, newest first."""
        with self._lock:
            return list(reversed(self._namespaces))

    def learn(
        self,
        prior: str | None,
        tokens: Sequence[int],
        keys: Sequence[str],
        namespace: Namespace,
    ) -> int:
        """Enters the pages of ``tokens`` (whole pages, the first chained
        from ``prior``, or from the namespace's seed when None) as long as
        they hash to ``keys``; returns how many were entered.
        """
        ps = self.page_size
        n = min(len(keys), len(tokens) // ps)
        if n == 0:
            return 0
        toks = [int(t) for t in tokens[: n * ps]]
        seed = prior if prior is not None else namespace.seed
        hashes = get_hash_str(toks, seed, page_size=ps)
        good = 0
        while good < n and hashes[good] == keys[good]:
            good += 1
        with self._lock:
            before = self._entries.get(prior) if prior is not None else None
            if before is not None:
                namespace = before.namespace
            parent = prior
            for i in range(good):
                self._entries[keys[i]] = _Entry(
                    parent, tuple(toks[i * ps : (i + 1) * ps]), namespace
                )
                self._entries.move_to_end(keys[i])
                parent = keys[i]
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
            if good and prior is None:
                self._namespaces[namespace] = None
                self._namespaces.move_to_end(namespace)
                while len(self._namespaces) > _NAMESPACES:
                    self._namespaces.popitem(last=False)
        return good

    def path(self, key: str) -> Path | None:
        """The tokens from the root through ``key``, or None when a key on
        the way is not known.
        """
        chunks: list[tuple[int, ...]] = []
        namespace: Namespace | None = None
        with self._lock:
            cur: str | None = key
            while cur is not None:
                e = self._entries.get(cur)
                if e is None:
                    return None
                self._entries.move_to_end(cur)
                chunks.append(e.tokens)
                namespace = e.namespace
                cur = e.parent
        assert namespace is not None
        return Path([t for c in reversed(chunks) for t in c], namespace)
