"""The KV layout kvpilot registers for a vLLM engine, from vLLM's own config.

The scheduler and the workers of one engine must register the same layout
to share a registration, so both build it from the same facts: the KV cache
spec vLLM computed (block size, KV heads, head size, dtype, the attention
layers) and the model's rotary config (``rope_parameters``: theta, scaling,
partial rotary). A worker then checks the tensors it was handed agree with
it (``kvpilot.vllm.blockmap``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvpilot.layout import Buffer, Layout, RopeConfig, RopeScaling, RopeSlice, dtype_name
from kvpilot.vllm.settings import (
    KEY_PREFIX,
    LOGGER_NAME,
    ConnectorConfigError,
    ConnectorSettings,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig

log = logging.getLogger(LOGGER_NAME)

# Model types whose rotary embedding pairs adjacent elements (GPT-J style,
# vLLM's is_neox_style=False); every other model pairs the two halves.
_INTERLEAVED_MODEL_TYPES = frozenset(
    {
        "gptj",
        "glm",
        "glm4",
        "chatglm",
        "cohere",
        "cohere2",
        "ernie4_5_moe",
        "llama4",
        "llama4_text",
    }
)

# rope_type values kvpilot's splice can rotate with.
_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class Geometry:
    """One engine's KV geometry: the layout, its RoPE and vLLM's layer order.

    ``layer_names[i]`` is the vLLM attention layer stored as layout layer i.

    A page holds every KV head of the model; under tensor parallelism each
    of the ``parts`` ranks holds ``local_heads`` of them (``heads_of``).
    """

    layout: Layout
    rope: RopeConfig
    layer_names: tuple[str, ...]
    head_dim: int
    #: Processes writing each page: vLLM's tensor-parallel ranks.
    parts: int = 1
    #: KV heads in each rank's cache (MLA: 1, its whole row); 0 for a
    #: geometry built without parallelism in mind: every head.
    local_heads: int = 0

    def describe(self) -> str:
        """The layout in one line, for logs and errors."""
        lay = self.layout
        b = lay.buffers[0]
        rope = (
            f"rope {lay.rope.dim}/{b.head_dim} {lay.rope.style} base {self.rope.base:g}"
            if lay.rope is not None
            else "no rope"
        )
        if self.mla:
            heads = f"mla rows={b.head_dim}"
        else:
            heads = f"kv_heads={b.heads} head_dim={b.head_dim}"
        return (
            f"model={lay.model!r} page_size={lay.page_size} dtype={lay.dtype} "
            f"layers={lay.layers} {heads} {rope}"
        )

    @property
    def mla(self) -> bool:
        """Whether a page holds MLA's fused ``[kv_c | k_pe]`` rows."""
        return len(self.layout.buffers) == 1

    def heads_of(self, rank: int) -> slice:
        """The page heads tensor-parallel rank ``rank`` holds.

        vLLM splits the KV heads evenly over the ranks; with fewer heads
        than ranks each head is replicated on ``parts // heads`` ranks in
        a row. MLA's latent rows are whole on every rank.
        """
        heads = self.layout.buffers[0].heads
        if self.mla or self.parts == 1:
            return slice(0, heads)
        first = rank * self.local_heads if heads >= self.parts else rank * heads // self.parts
        return slice(first, first + self.local_heads)


def check_parallelism(vllm_config: VllmConfig) -> int:
    """Returns the tensor-parallel size, refusing the parallel layouts the
    connector does not handle yet.

    Tensor-parallel ranks each hold a slice of a page's KV heads and write
    it as one part of the page (kvpilot.vllm.saver). A pipeline or
    decode-context parallel worker holds a share of the layers or of the
    tokens: not handled yet.
    """
    pc = vllm_config.parallel_config
    tp = int(getattr(pc, "tensor_parallel_size", 1) or 1)
    pp = getattr(pc, "pipeline_parallel_size", 1)
    dcp = getattr(pc, "decode_context_parallel_size", 1)
    if pp != 1 or dcp != 1:
        raise ConnectorConfigError(
            "kvpilot connector: pipeline and decode-context parallelism are not supported yet "
            f"(pipeline_parallel_size={pp}, decode_context_parallel_size={dcp}): run this vLLM "
            "with tensor parallelism only (data parallelism is fine: each rank registers as "
            "its own engine)"
        )
    if tp > _MAX_PARTS:
        raise ConnectorConfigError(
            f"kvpilot connector: tensor_parallel_size={tp}: kvpilot takes at most {_MAX_PARTS} "
            "ranks per engine"
        )
    return tp


#: The host's bound on the processes writing one page (RegisterRequest.parts).
_MAX_PARTS = 64


def engine_id(vllm_config: VllmConfig, settings: ConnectorSettings) -> str:
    """The id the scheduler and workers of this engine register under.

    vLLM gives every engine a ``kv_transfer_config.engine_id`` that its
    scheduler and workers share (it is broadcast across a worker group);
    each data-parallel rank is an engine of its own.
    """
    ktc = vllm_config.kv_transfer_config  # None only where no connector is configured
    vllm_id = ktc.engine_id if ktc is not None else None
    base = settings.engine_id or str(vllm_id or "")
    if not base:
        raise ConnectorConfigError(
            f"kvpilot connector: vLLM gave this engine no kv_transfer_config.engine_id; set "
            f"{KEY_PREFIX}.engine_id to a name its scheduler and workers share"
        )
    rank = getattr(vllm_config.parallel_config, "data_parallel_rank", 0) or 0
    return f"vllm-{base}-dp{rank}"


def model_name(vllm_config: VllmConfig, settings: ConnectorSettings) -> str:
    """The model name the layout registers under (it keys the cache)."""
    if settings.model:
        return settings.model
    served = vllm_config.model_config.served_model_name
    if isinstance(served, (list, tuple)):
        served = served[0] if served else ""
    return str(served or vllm_config.model_config.model)


def geometry(
    vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, settings: ConnectorSettings
) -> Geometry:
    """The layout of this engine's KV cache, from vLLM's KV cache spec.

    Raises ConnectorConfigError for caches kvpilot cannot hold yet: several
    KV cache groups, every layer a sliding window, quantized caches other
    than fp8 (and any on MLA), padded pages, K and V of different widths.
    """
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
    )

    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise ConnectorConfigError(
            f"kvpilot connector: this model has {len(groups)} KV cache groups (a hybrid or "
            "sliding-window model); the kvpilot connector supports models whose layers all "
            "use full attention"
        )
    spec = groups[0].kv_cache_spec
    layer_names = tuple(groups[0].layer_names)
    if not layer_names:
        raise ConnectorConfigError("kvpilot connector: the model has no attention layers")
    if isinstance(spec, MLAAttentionSpec):
        return _mla_geometry(vllm_config, spec, layer_names, settings)
    if isinstance(spec, SlidingWindowSpec):
        raise ConnectorConfigError(
            "kvpilot connector: every attention layer of this model uses a sliding window "
            f"({spec.sliding_window} tokens), and vLLM frees a request's blocks behind the "
            "window, so its prefix is not in vLLM's blocks to save or to load into; the "
            "connector caches models with full-attention layers (a model mixing sliding-window "
            "and full-attention layers is cached whole, as vLLM keeps every layer's KV for it)"
        )
    if not isinstance(spec, FullAttentionSpec):
        raise ConnectorConfigError(
            f"kvpilot connector: KV cache spec {type(spec).__name__} is not supported yet "
            "(the connector handles full attention with K and V: MHA, GQA, MQA; and MLA)"
        )
    dtype = kv_dtype(vllm_config.cache_config.cache_dtype, spec.dtype)
    head_v = getattr(spec, "head_size_v", spec.head_size)
    padded = getattr(spec, "page_size_padded", None)
    slots = getattr(spec, "num_head_slots", None)
    if head_v != spec.head_size or padded is not None or slots not in (None, spec.num_kv_heads):
        raise ConnectorConfigError(
            f"kvpilot connector: KV pages with head_size {spec.head_size}, head_size_v "
            f"{head_v}, page_size_padded {padded}, num_head_slots {slots} are not supported "
            "yet (want K and V of one width, unpadded)"
        )

    hf = vllm_config.model_config.hf_text_config
    rope_dim, style, rope = rope_of(hf, spec.head_size, settings)
    if rope_dim and _has_sliding_layers(hf):
        # vLLM keeps every layer's KV of a hybrid model (no hybrid KV cache
        # manager with a connector or on CPU), so its pages are whole; what a
        # splice does to a window that moves with it is not defined yet.
        log.info(
            "kvpilot connector: this model has sliding-window layers: its pages are cached "
            "without a RoPE slice (prefix caching works; splices are refused)"
        )
        rope_dim, style, rope = 0, "", RopeConfig()
    parts = check_parallelism(vllm_config)
    heads = _total_kv_heads(vllm_config, spec.num_kv_heads, parts)
    layout = Layout.mha(
        model_name(vllm_config, settings),
        page_size=spec.block_size,
        dtype=dtype,
        layers=len(layer_names),
        kv_heads=heads,
        head_dim=spec.head_size,
        rope_dim=rope_dim,
        rope_style=style or "half_split",
    )
    layout.validate()
    return Geometry(
        layout=layout,
        rope=rope,
        layer_names=layer_names,
        head_dim=spec.head_size,
        parts=parts,
        local_heads=spec.num_kv_heads,
    )


def _total_kv_heads(vllm_config: VllmConfig, local: int, parts: int) -> int:
    """The model's KV heads, a page's, given a rank's ``local`` of them
    (vLLM's KV cache spec is a rank's). Raises ConnectorConfigError when
    the split is not vLLM's even one.
    """
    if parts == 1:
        return local
    total = int(vllm_config.model_config.get_total_num_kv_heads())
    if local != max(1, total // parts) or (total >= parts and total % parts):
        raise ConnectorConfigError(
            f"kvpilot connector: a rank's KV cache holds {local} of the model's {total} KV heads "
            f"over {parts} tensor-parallel ranks; kvpilot expects vLLM's even split "
            f"({max(1, total // parts)} heads a rank)"
        )
    return total


def _mla_geometry(
    vllm_config: VllmConfig, spec: Any, layer_names: tuple[str, ...], settings: ConnectorSettings
) -> Geometry:
    """The layout of an MLA cache (DeepSeek-V2/V3): one row a token and a
    layer, the latent ``kv_c`` then the rotated ``k_pe``, which vLLM's
    DeepSeek models rotate pairing adjacent elements.
    """
    hf = vllm_config.model_config.hf_text_config
    rank = int(getattr(hf, "kv_lora_rank", 0) or 0)
    rope_dim = int(getattr(hf, "qk_rope_head_dim", 0) or 0)
    cache_dtype = vllm_config.cache_config.cache_dtype
    if cache_dtype not in _UNQUANTIZED:
        raise ConnectorConfigError(
            f"kvpilot connector: kv_cache_dtype={cache_dtype} on an MLA model is not supported "
            "yet: run with --kv-cache-dtype auto"
        )
    if rank <= 0 or rope_dim <= 0 or rank + rope_dim != spec.head_size:
        raise ConnectorConfigError(
            f"kvpilot connector: MLA cache rows of {spec.head_size} elements are not the "
            f"model's kv_lora_rank {rank} and qk_rope_head_dim {rope_dim}"
        )
    _, _, rope = rope_of(hf, rope_dim, settings)
    layout = Layout(
        model_name(vllm_config, settings),
        spec.block_size,
        dtype_name(spec.dtype),
        len(layer_names),
        (Buffer("kv", 1, spec.head_size),),
        RopeSlice(0, rank, rope_dim, settings.rope_style or "interleaved"),
    )
    layout.validate()
    return Geometry(
        layout=layout,
        rope=rope,
        layer_names=layer_names,
        head_dim=spec.head_size,
        parts=check_parallelism(vllm_config),
        local_heads=1,
    )


#: vLLM's --kv-cache-dtype values whose pages kvpilot holds, and their
#: layout dtype. An fp8 cache is bytes (torch.uint8) to vLLM; its elements
#: are quantized with a per-layer scale the model's checkpoint sets (1.0
#: when it sets none), so pages of one model name are alike in every
#: process.
_FP8_CACHE_DTYPES = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}

#: --kv-cache-dtype values that keep the model's own dtype.
_UNQUANTIZED = (None, "auto", "bfloat16", "float16", "float32")


def _has_sliding_layers(hf_config: Any) -> bool:
    """Whether some of the model's attention layers use a sliding window, as
    its config's ``layer_types`` say (a model whose every layer slides has
    SlidingWindowSpec caches, refused before this).
    """
    return "sliding_attention" in (getattr(hf_config, "layer_types", None) or ())


def kv_dtype(cache_dtype: str | None, spec_dtype: Any) -> str:
    """The layout dtype of a vLLM KV cache of cache_dtype (--kv-cache-dtype)
    whose spec says spec_dtype.
    """
    if cache_dtype in _UNQUANTIZED:
        return dtype_name(spec_dtype)
    fp8 = _FP8_CACHE_DTYPES.get(str(cache_dtype))
    if fp8 is None:
        raise ConnectorConfigError(
            f"kvpilot connector: kv_cache_dtype={cache_dtype} is not supported: run with "
            f"--kv-cache-dtype auto, {', '.join(sorted(_FP8_CACHE_DTYPES))}"
        )
    return fp8


def rope_of(
    hf_config: Any, head_dim: int, settings: ConnectorSettings
) -> tuple[int, str, RopeConfig]:
    """The rotated width, pairing and RoPE config of a model's keys.

    Returns ``(0, "", RopeConfig())`` for a model without rotary keys, or
    one whose scaling kvpilot cannot rotate with: its pages are cached all
    the same, only never spliced.
    """
    params = _rope_parameters(hf_config)
    if params is None:
        return 0, "", RopeConfig()
    kind = str(params.get("rope_type") or params.get("type") or "default")
    # vLLM's DeepSeek models rename their yarn scaling in the config they
    # were built from (a worker's copy): the same scaling.
    kind = {"deepseek_yarn": "yarn"}.get(kind, kind)
    if kind not in _ROPE_TYPES:
        log.info(
            "kvpilot connector: rope_type %r cannot be rotated by kvpilot's splice; pages are "
            "cached without a RoPE slice (prefix caching works, splicing does not)",
            kind,
        )
        return 0, "", RopeConfig()
    dim = params.get("rope_dim")
    if not dim:
        partial = float(
            params.get("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", 1.0))
            or 1.0
        )
        dim = int(head_dim * partial)
    dim = int(dim)
    if dim < 2 or dim % 2 or dim > head_dim:
        log.info(
            "kvpilot connector: rotary width %d of a %d-wide head: no RoPE slice", dim, head_dim
        )
        return 0, "", RopeConfig()
    style = settings.rope_style or (
        "interleaved"
        if str(getattr(hf_config, "model_type", "")) in _INTERLEAVED_MODEL_TYPES
        else "half_split"
    )
    theta = float(params.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)) or 10000.0)
    orig = int(
        params.get("original_max_position_embeddings")
        or getattr(hf_config, "original_max_position_embeddings", 0)
        or 0
    )
    scaling = RopeScaling()
    if kind == "linear":
        scaling = RopeScaling(type="linear", factor=float(params.get("factor", 1.0)))
    elif kind == "llama3":
        scaling = RopeScaling(
            type="llama3",
            factor=float(params.get("factor", 1.0)),
            original_max_position=orig,
            low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        )
    elif kind == "yarn":
        scaling = RopeScaling(
            type="yarn",
            factor=float(params.get("factor", 1.0)),
            original_max_position=orig,
            beta_fast=float(params.get("beta_fast", 32.0)),
            beta_slow=float(params.get("beta_slow", 1.0)),
            mscale=float(params.get("mscale") or 0.0),
            mscale_all_dim=float(params.get("mscale_all_dim") or 0.0),
            attention_factor=float(params.get("attention_factor") or 0.0),
            no_truncate=params.get("truncate", True) is False,
        )
    return dim, style, RopeConfig(base=theta, scaling=scaling)


def _rope_parameters(hf_config: Any) -> Mapping[str, Any] | None:
    """The model's rope parameters as one flat mapping, or None without RoPE.

    vLLM normalises configs to ``rope_parameters``; older configs carry
    ``rope_theta`` and ``rope_scaling``. Per-layer-type parameters
    (``{"full_attention": {...}, ...}``) take the full-attention entry.
    """
    params = getattr(hf_config, "rope_parameters", None)
    if isinstance(params, Mapping) and params:
        if all(isinstance(v, Mapping) for v in params.values()):
            params = params.get("full_attention") or next(iter(params.values()))
        return params
    theta = getattr(hf_config, "rope_theta", None)
    if theta is None:
        return None
    scaling = getattr(hf_config, "rope_scaling", None) or {}
    return {"rope_theta": theta, **dict(scaling)}
