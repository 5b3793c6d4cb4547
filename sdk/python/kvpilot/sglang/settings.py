"""The backend's settings: SGLang's ``--hicache-storage-backend-extra-config``.

SGLang hands a dynamic backend the whole extra config, its own keys included
(``backend_name``, ``module_path``, ``class_name``, ``interface_v1``; it
takes ``prefetch_threshold`` and the other prefetch knobs out first). Every
other key is the backend's, and is checked when SGLang attaches it, so a
typo or a missing socket fails the attach with one message naming the key,
rather than serving silently without kvpilot.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from kvpilot import extraconfig
from kvpilot.layout import ROPE_STYLES

#: Where the user sets these: the message prefix of every setting.
KEY_PREFIX = "--hicache-storage-backend-extra-config"

#: The backend logs under SGLang's logger tree, so SGLang's log level applies.
LOGGER_NAME = "sglang.kvpilot"

#: Keys of the extra config that belong to SGLang, not to the backend.
SGLANG_KEYS = (
    "backend_name",
    "module_path",
    "class_name",
    "interface_v1",
    "file_storage_path",
)

EXAMPLE = (
    "--hicache-storage-backend dynamic --hicache-storage-backend-extra-config "
    '\'{"backend_name":"kvpilot","module_path":"kvpilot.sglang","class_name":"KvpilotStorage",'
    '"interface_v1":1,"hicache_storage_pass_prefix_keys":true,'
    '"socket":"/run/kvpilot/engine.sock"}\''
)


class StorageConfigError(ValueError):
    """A setting of the kvpilot backend, or SGLang's configuration around it,
    is one the backend cannot serve. The message names what to change.
    """


@dataclass(frozen=True)
class StorageSettings:
    """What the extra config may hold for the backend.

    Attributes:
        socket: the kvpilot host's engine socket (required). ``{tp_rank}``,
            ``{pp_rank}`` and ``{dp_rank}`` in it are replaced by the rank's
            own: each rank of a parallel SGLang has a host of its own,
            since each holds another shard of every page. An MLA model's
            tensor-parallel ranks hold the same latent rows and share one
            registration on one host instead: ``{tp_rank}`` is then the
            storage writer's rank (0) on every rank.
        timeout_s: seconds one call to the host may take; past it the call
            is a miss and SGLang goes on.
        load_back_deadline_ms: how long a lookup may wait for pages coming
            back from kvpilot's disk or remote tiers (0: the host's).
        retry_after_s: after a failed call the backend leaves the host alone
            this long (doubling up to a minute) and every call is a miss.
        engine_id: the id this SGLang rank registers under (default from the
            model and the ranks; an MLA model's tensor-parallel ranks share
            one, which joins them in one registration).
        model: the model name the layout registers under (default SGLang's
            model name); engines share pages only under the same name.
        reset_cache: drop every page the host holds when registering.
        rope_theta: the model's RoPE base, for splices (0: no RoPE slice is
            registered; the host then caches pages but refuses to splice).
        rope_dim: rotated elements per key head (default the whole head;
            an MLA row's ``qk_rope_head_dim``, the only width it may be).
        rope_style: ``half_split`` (NeoX: Llama, Qwen) or ``interleaved``
            (GPT-J, DeepSeek); "" (the default) is ``half_split`` for K/V
            pools and ``interleaved`` for MLA, as DeepSeek's models rotate.
        ledger_pages: how many SGLang page keys the backend remembers the
            tokens of (the newest are kept).
    """

    socket: str
    timeout_s: float = 2.0
    load_back_deadline_ms: int = 500
    retry_after_s: float = 5.0
    engine_id: str = ""
    model: str = ""
    reset_cache: bool = False
    rope_theta: float = 0.0
    rope_dim: int = 0
    rope_style: str = ""
    ledger_pages: int = 1 << 18

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The setting names, in declaration order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_extra_config(
        cls, extra: Mapping[str, Any] | None, ranks: Mapping[str, int]
    ) -> StorageSettings:
        """Reads and checks the extra config; ``ranks`` fill the socket's
        ``{tp_rank}``-style fields. Raises StorageConfigError naming the
        first bad key.
        """
        extra = dict(extra or {})
        unknown = extraconfig.first_unknown(extra, (*cls.names(), *SGLANG_KEYS))
        if unknown is not None:
            raise StorageConfigError(
                f"kvpilot SGLang backend: {unknown!r} in {KEY_PREFIX} is not a setting of the "
                f"kvpilot backend (known: {', '.join(cls.names())})"
            )
        sock = extra.get("socket")
        if not isinstance(sock, str) or not sock.strip():
            raise StorageConfigError(
                f"kvpilot SGLang backend: 'socket' is not set in {KEY_PREFIX}: set it to the "
                "engine socket of the kvpilot host beside this SGLang (`kvpilot serve` logs it; "
                f"<data_dir>/run/engine.sock by default), e.g. {EXAMPLE}"
            )
        try:
            sock = sock.strip().format(**ranks)
        except (KeyError, IndexError, ValueError) as e:
            raise StorageConfigError(
                f"kvpilot SGLang backend: socket {sock!r} in {KEY_PREFIX}: only {{tp_rank}}, "
                f"{{pp_rank}} and {{dp_rank}} may be filled in ({e})"
            ) from None
        style = extra.get("rope_style", cls.rope_style)
        if style != cls.rope_style and style not in ROPE_STYLES:
            raise StorageConfigError(
                f"kvpilot SGLang backend: rope_style = {style!r} in {KEY_PREFIX}: want one of "
                f"{', '.join(ROPE_STYLES)}"
            )
        return cls(
            socket=os.path.abspath(os.path.expanduser(sock)),
            timeout_s=extraconfig.number(extra, "timeout_s", cls.timeout_s, 0.05, 600.0, _bad),
            load_back_deadline_ms=int(
                extraconfig.number(
                    extra, "load_back_deadline_ms", cls.load_back_deadline_ms, 0, 600_000, _bad
                )
            ),
            retry_after_s=extraconfig.number(
                extra, "retry_after_s", cls.retry_after_s, 0, 3600, _bad
            ),
            engine_id=extraconfig.string(extra, "engine_id", _bad),
            model=extraconfig.string(extra, "model", _bad),
            reset_cache=extraconfig.flag(extra, "reset_cache", _bad),
            rope_theta=extraconfig.number(extra, "rope_theta", 0, 0, 1e12, _bad),
            rope_dim=int(extraconfig.number(extra, "rope_dim", 0, 0, 4096, _bad)),
            rope_style=str(style),
            ledger_pages=int(
                extraconfig.number(extra, "ledger_pages", cls.ledger_pages, 1, 1 << 30, _bad)
            ),
        )


def _bad(key: str, value: Any, want: str) -> StorageConfigError:
    return StorageConfigError(
        f"kvpilot SGLang backend: {key} = {value!r} in {KEY_PREFIX}: want {want}"
    )
