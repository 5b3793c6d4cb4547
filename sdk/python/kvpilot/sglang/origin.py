"""The tokens behind a storage call, read from the SGLang operation it serves.

SGLang 0.5.23 calls a storage backend with page keys and host rows only
(``batch_exists(keys, extra_info)``, ``batch_get_v1``/``batch_set_v1(keys,
host_indices, extra_info)``, where ``extra_info`` carries at most the keys
before them); the tokens never reach the backend. Its storage threads do
hold them, one frame up or two: the controller's backup and prefetch loops
call the backend with the ``operation`` they work on as a local variable
(``StorageOperation``: ``token_ids`` of the node, its keys in
``hash_value``, the keys before it in ``prefix_keys``; ``PrefetchOperation``:
the request's new ``token_ids``, the key before them in ``last_hash``, and
every key of them in ``all_hash_values``).

``learn_from_caller`` walks a few frames up for such an operation and offers
its tokens to the ledgers, which believe them only when SGLang's own hash of
them gives the keys (kvpilot.sglang.ledger). This reads SGLang's state and
changes none of it. When SGLang calls in another way (a later release, a
test calling the backend directly), nothing is learnt and the call is a
miss: never a wrong page.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from kvpilot.sglang.ledger import Ledger, Namespace

# Frames between the backend's method and the controller's loop: the
# backend's own method and guard, SGLang's failure injector, the
# controller's page function, its batch loop.
_MAX_FRAMES = 10


def learn_from_caller(ledgers: Sequence[Ledger], keys: Sequence[str], extra_info: Any) -> bool:
    """Finds the operation serving ``keys`` up the stack and enters its
    tokens in every one of ``ledgers``; returns whether the first now knows
    the keys' tokens.
    """
    if not keys:
        return True
    if all(led.knows(keys[-1]) for led in ledgers):
        return True
    f = sys._getframe(1)
    for _ in range(_MAX_FRAMES):
        back = f.f_back
        if back is None:
            break
        f = back
        op = f.f_locals.get("operation")
        if op is not None and hasattr(op, "token_ids"):
            for led in ledgers:
                if not led.knows(keys[-1]):
                    learn_operation(led, op, keys, extra_info)
            break
    return ledgers[0].knows(keys[-1])


def learn_operation(ledger: Ledger, op: Any, keys: Sequence[str], extra_info: Any) -> int:
    """Enters the tokens of one SGLang storage operation whose keys include
    ``keys``; returns the pages entered.
    """
    tokens = op.token_ids
    if getattr(tokens, "is_bigram", False):
        # EAGLE's bigram keys hash token pairs: no kvpilot identity.
        return 0
    chain = getattr(op, "all_hash_values", None)
    if not chain or keys[0] not in chain:
        chain = getattr(op, "hash_value", None)
    if not chain or keys[0] not in chain:
        return 0
    if hasattr(tokens, "raw_token_ids"):
        # A RadixKey: the request's tokens with its namespace.
        raw = tokens.raw_token_ids()
        namespaces = [Namespace(tokens.extra_key, tokens.cache_salt)]
    else:
        # A node's bare tokens (a backup): the namespace matters for a first
        # page only, and is one this worker met in a request's storage
        # lookup, which SGLang runs before it prefills.
        raw = tokens
        namespaces = [Namespace(), *ledger.namespaces()]
    for prior in _priors(op, chain, keys, extra_info):
        for namespace in namespaces if prior is None else namespaces[:1]:
            got = ledger.learn(prior, raw, chain, namespace)
            if got:
                return got
    return 0


def _priors(op: Any, chain: Sequence[str], keys: Sequence[str], extra_info: Any) -> list:
    """The keys the chain may continue, most likely first; None is the root."""
    out: list[str | None] = []
    last = getattr(op, "last_hash", None)
    if last:
        out.append(last)
    before = getattr(op, "prefix_keys", None)
    if before:
        out.append(before[-1])
    given = getattr(extra_info, "prefix_keys", None)
    skipped = chain.index(keys[0])
    if given and len(given) > skipped:
        out.append(given[len(given) - 1 - skipped])
    out.append(None)
    return list(dict.fromkeys(out))
