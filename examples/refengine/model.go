package refengine

import (
	"fmt"

	"github.com/kvpilot/kvpilot/kernels/rope"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// Model is the reference engine's model shape: a GQA model (K and V buffers
// of KVHeads×HeadDim, the first RopeDim elements of each key head rotary)
// or an MLA model (one fused [kv_c | k_pe] row of KVLoraRank+RopeDim).
type Model struct {
	Name string `json:"name"`
	// Attention is "gqa" or "mla".
	Attention string `json:"attention"`
	// DType is fp32 or bf16.
	DType      string `json:"dtype"`
	PageSize   int    `json:"page_size"`
	Layers     int    `json:"layers"`
	KVHeads    int    `json:"kv_heads"`
	HeadDim    int    `json:"head_dim"`
	KVLoraRank int    `json:"kv_lora_rank"`
	RopeDim    int    `json:"rope_dim"`
	// RopeStyle is half_split or interleaved (MLA: interleaved).
	RopeStyle   string                   `json:"rope_style"`
	RopeBase    float64                  `json:"rope_base"`
	RopeScaling engineclient.RopeScaling `json:"rope_scaling"`
}

// GQA is a small Llama-like model: 2 layers, 2 KV heads of 16, fully
// rotary, NeoX pairing.
func GQA(pageSize int) Model {
	return Model{Name: "ref-gqa", Attention: "gqa", DType: "fp32", PageSize: pageSize, Layers: 2, KVHeads: 2, HeadDim: 16,
		RopeDim: 16, RopeStyle: "half_split", RopeBase: 10000}
}

// MLA is a small DeepSeek-like model: 2 layers, kv_c of 32 and k_pe of 16,
// interleaved, with YaRN scaling.
func MLA(pageSize int) Model {
	return Model{Name: "ref-mla", Attention: "mla", DType: "fp32", PageSize: pageSize, Layers: 2, KVLoraRank: 32,
		RopeDim: 16, RopeStyle: "interleaved", RopeBase: 10000,
		RopeScaling: engineclient.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPosition: 4096, MScale: 1, MScaleAllDim: 1}}
}

// Layout is the layout the engine registers.
func (m Model) Layout() (enginewire.Layout, error) {
	l := enginewire.Layout{Model: m.Name, PageSize: m.PageSize, DType: m.DType, Layers: m.Layers}
	switch m.Attention {
	case "gqa":
		l.Buffers = []enginewire.Buffer{{Name: "k", Heads: m.KVHeads, HeadDim: m.HeadDim}, {Name: "v", Heads: m.KVHeads, HeadDim: m.HeadDim}}
		l.Rope = &enginewire.RopeSlice{Buffer: 0, Offset: 0, Dim: m.RopeDim, Style: m.RopeStyle}
	case "mla":
		l.Buffers = []enginewire.Buffer{{Name: "kv", Heads: 1, HeadDim: m.KVLoraRank + m.RopeDim}}
		l.Rope = &enginewire.RopeSlice{Buffer: 0, Offset: m.KVLoraRank, Dim: m.RopeDim, Style: "interleaved"}
	default:
		return l, fmt.Errorf("model %s: attention %q: want gqa or mla", m.Name, m.Attention)
	}
	if m.DType != "fp32" && m.DType != "bf16" {
		return l, fmt.Errorf("model %s: dtype %q: the reference engine writes fp32 or bf16", m.Name, m.DType)
	}
	return l, l.Validate()
}

// Rotary builds the model's RoPE.
func (m Model) Rotary(l enginewire.Layout) (*rope.Rotary, error) {
	c := rope.Config{Base: m.RopeBase, Dim: l.Rope.Dim, Pairing: rope.HalfSplit}
	if l.Rope.Style == "interleaved" {
		c.Pairing = rope.Interleaved
	}
	s := m.RopeScaling
	st, err := rope.ParseScalingType(s.Type)
	if err != nil {
		return nil, err
	}
	c.Scaling = rope.Scaling{Type: st, Factor: s.Factor, OriginalMaxPosition: s.OriginalMaxPosition,
		LowFreqFactor: s.LowFreqFactor, HighFreqFactor: s.HighFreqFactor, BetaFast: s.BetaFast, BetaSlow: s.BetaSlow,
		MScale: s.MScale, MScaleAllDim: s.MScaleAllDim, AttentionFactor: s.AttentionFactor, NoTruncate: s.NoTruncate}
	return rope.New(c)
}

// CostModel turns a turn's work into a modelled time to first token:
// OverheadMs + prefilled tokens × PrefillMsPerToken + loaded-back bytes at
// LoadBackGBps. The defaults model a 14B-class model on one GPU.
type CostModel struct {
	PrefillMsPerToken float64 `json:"prefill_ms_per_token"`
	LoadBackGBps      float64 `json:"load_back_gbps"`
	OverheadMs        float64 `json:"overhead_ms"`
}

// DefaultCost is 0.15 ms per prefilled token, 20 GB/s load-back (PCIe 4
// host to device), 15 ms of fixed work.
var DefaultCost = CostModel{PrefillMsPerToken: 0.15, LoadBackGBps: 20, OverheadMs: 15}

// TTFT models one turn's time to first token in milliseconds.
func (c CostModel) TTFT(prefilled int, loadedBytes int64) float64 {
	ms := c.OverheadMs + float64(prefilled)*c.PrefillMsPerToken
	if c.LoadBackGBps > 0 {
		ms += float64(loadedBytes) / (c.LoadBackGBps * 1e9) * 1e3
	}
	return ms
}
