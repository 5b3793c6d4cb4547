package scenario

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// PinFloodParams shape the pin-flood scenario: a VIP session warmed for
// WarmupTurns turns, a flood of unrelated multi-turn sessions whose unique
// tokens add up to FloodFactor times the device plus host capacity, sent
// by Concurrency clients, then the VIP's next turn.
type PinFloodParams struct {
	VIP   Trace   `json:"-"`
	Flood []Trace `json:"-"`
	// Shape's SystemTokens is the VIP's fixed system block (the reference
	// run's VIP had a ~3.8K-token system prompt).
	Shape

	HostPages   int     `json:"host_pages"`
	WarmupTurns int     `json:"warmup_turns"`
	FloodFactor float64 `json:"flood_factor"`
	Concurrency int     `json:"concurrency"`
	// FloodMessageChars cuts flood messages (about 4 characters a token) and
	// FloodMaxRequests its sessions to the reference run's flood shape:
	// turns of ~150 tokens, sessions of 19-31 turns.
	FloodMessageChars int    `json:"flood_message_chars"`
	FloodMaxRequests  int    `json:"flood_max_requests"`
	TTL               string `json:"ttl"`
	// AdmitTokens bounds the tokens of requests running at once (default
	// half the device capacity); the rest of the clients queue.
	AdmitTokens int `json:"admit_tokens"`
	// DeviceHigh and DeviceLow override the device tier's watermarks (0:
	// the host defaults).
	DeviceHigh float64 `json:"device_high_watermark,omitempty"`
	DeviceLow  float64 `json:"device_low_watermark,omitempty"`
}

func (p *PinFloodParams) defaults() {
	p.Shape.defaults()
	p.DevicePages = cmp.Or(p.DevicePages, 2048)
	p.HostPages = cmp.Or(p.HostPages, 4096)
	p.WarmupTurns = cmp.Or(p.WarmupTurns, 10)
	p.FloodFactor = cmp.Or(p.FloodFactor, 5)
	p.Concurrency = cmp.Or(p.Concurrency, 128)
	p.FloodMessageChars = cmp.Or(p.FloodMessageChars, 600)
	p.FloodMaxRequests = cmp.Or(p.FloodMaxRequests, 30)
	p.TTL = cmp.Or(p.TTL, "5m")
	p.AdmitTokens = cmp.Or(p.AdmitTokens, p.DevicePages*p.PageSize/2)
}

// PinFloodArm is one arm's measurement of the VIP's turn after the flood.
type PinFloodArm struct {
	PromptTokens  int `json:"prompt_tokens"`
	CachedTokens  int `json:"cached_tokens"`
	PrefillTokens int `json:"prefill_tokens"`
	// PinnedTokens are the tokens in full pages of the prefix the warm-up
	// pinned (0 when nothing was pinned); PrefixTokens those of the
	// warm-up's last committed prefix, pinned or not.
	PinnedTokens int `json:"pinned_tokens"`
	PinnedBlocks int `json:"pinned_blocks"`
	PrefixTokens int `json:"prefix_tokens"`
	// HitRate is cached/prompt; PinnedHit cached/pinned (the target);
	// PrefixHit cached/prefix.
	HitRate     float64 `json:"hit_rate"`
	PinnedHit   float64 `json:"pinned_hit"`
	PrefixHit   float64 `json:"prefix_hit"`
	TTFTms      float64 `json:"ttft_ms"`
	LoadedPages int     `json:"loaded_pages"`
	LoadedBytes int64   `json:"loaded_bytes"`
	// VIPDevicePages and VIPHostPages are where the VIP's prefix pages
	// were just before its turn.
	VIPDevicePages int `json:"vip_device_pages"`
	VIPHostPages   int `json:"vip_host_pages"`
	// Flood: what the flood sent.
	FloodSessions     int     `json:"flood_sessions"`
	FloodRequests     int     `json:"flood_requests"`
	FloodUniqueTokens int64   `json:"flood_unique_tokens"`
	FloodCapacityX    float64 `json:"flood_capacity_x"`
	FloodSeconds      float64 `json:"flood_seconds"`
	WallSeconds       float64 `json:"wall_seconds"`
}

// PinFloodReport is the scenario's result.
type PinFloodReport struct {
	Scenario string                 `json:"scenario"`
	Params   PinFloodParams         `json:"params"`
	Sizes    PinFloodSizes          `json:"sizes"`
	Arms     map[string]PinFloodArm `json:"arms"`
	Speedup  float64                `json:"speedup"`
	Targets  PinFloodTargets        `json:"targets"`
}

// PinFloodSizes are the scaled sizes, reported so the 5x ratio can be
// checked: capacity in tokens, and the flood the schedule holds.
type PinFloodSizes struct {
	CapacityTokens      int    `json:"capacity_tokens"`
	FloodUniqueTokens   int64  `json:"flood_unique_tokens"`
	FloodSessions       int    `json:"flood_sessions"`
	FloodRequests       int    `json:"flood_requests"`
	VIPSession          string `json:"vip_session"`
	VIPTurnPromptTokens int    `json:"vip_turn_prompt_tokens"`
	SystemPrefix        string `json:"system_prefix"`
}

// PinFloodTargets are the scenario's targets and whether they were met.
type PinFloodTargets struct {
	PinnedHitMin   float64 `json:"pinned_hit_min"`
	BaselineHitMax float64 `json:"baseline_hit_max"`
	SpeedupMin     float64 `json:"speedup_min"`
	Met            bool    `json:"met"`
}

type floodSession struct {
	name     string
	requests []Request
}

// RunPinFlood runs both arms, baseline then pinned, each on a fresh host.
func RunPinFlood(ctx context.Context, p PinFloodParams, prog Progress) (*PinFloodReport, error) {
	p.defaults()
	if len(p.VIP.Messages) == 0 || len(p.Flood) == 0 {
		return nil, fmt.Errorf("pin-flood: a VIP trace and at least one flood trace are required")
	}
	vip := Render(p.VIP, RenderOptions{System: SystemBlock("vip", p.SystemTokens), MaxRequests: p.WarmupTurns + 1})
	if len(vip) < p.WarmupTurns+1 {
		return nil, fmt.Errorf("pin-flood: VIP session %s has %d requests, need %d", p.VIP.SessionID, len(vip), p.WarmupTurns+1)
	}
	capTokens := (p.DevicePages + p.HostPages) * p.PageSize
	flood, unique, nreq := floodSchedule(p, int64(float64(capTokens)*p.FloodFactor))
	rep := &PinFloodReport{Scenario: "pin-flood", Params: p,
		Sizes: PinFloodSizes{CapacityTokens: capTokens, FloodUniqueTokens: unique, FloodSessions: len(flood), FloodRequests: nreq,
			VIPSession: p.VIP.SessionID, VIPTurnPromptTokens: len(vip[p.WarmupTurns].Prompt),
			SystemPrefix: fmt.Sprintf("deterministic %d-token system block prepended to the VIP session", p.SystemTokens)}}
	o := p.rig()
	o.HostPages, o.SkipContract = p.HostPages, true
	o.Adjust = func(c *config.Config) {
		c.Tiers.Device.HighWatermark = cmp.Or(p.DeviceHigh, c.Tiers.Device.HighWatermark)
		c.Tiers.Device.LowWatermark = cmp.Or(p.DeviceLow, c.Tiers.Device.LowWatermark)
	}
	var err error
	rep.Arms, err = runArms(ctx, "pin-flood", []string{"baseline", "pinned"}, func(string) RigOptions { return o }, func(rig *Rig, arm string) (PinFloodArm, error) {
		a, err := pinFloodArm(ctx, rig, p, arm, vip, flood, nreq, prog)
		a.FloodSessions, a.FloodRequests, a.FloodUniqueTokens = len(flood), nreq, unique
		a.FloodCapacityX = float64(unique) / float64(capTokens)
		return a, err
	})
	if err != nil {
		return nil, err
	}
	b, pin := rep.Arms["baseline"], rep.Arms["pinned"]
	if pin.TTFTms > 0 {
		rep.Speedup = b.TTFTms / pin.TTFTms
	}
	rep.Targets = PinFloodTargets{PinnedHitMin: 0.99, BaselineHitMax: 0.01, SpeedupMin: 5}
	rep.Targets.Met = pin.PinnedHit >= 0.99 && b.HitRate <= 0.01 && rep.Speedup >= 5
	return rep, nil
}

// runFlood runs the flood from p.Concurrency clients, each taking the next
// whole session and running it turn by turn, admitted while their tokens
// fit; the first error stops them all. say hears of every 100th request.
func runFlood(ctx context.Context, rig *Rig, p PinFloodParams, flood []floodSession, say func(done int64)) error {
	g := newGate(p.AdmitTokens)
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range p.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; int(i) < len(flood) && fctx.Err() == nil; i = next.Add(1) - 1 {
				for _, r := range flood[i].requests {
					tr := refengine.TurnRequest{Session: flood[i].name, Tenant: tenant, Tokens: r.Prompt, Output: r.Output}
					if _, err := runTurn(fctx, rig.Engine, g, tr); err != nil {
						cancel(err)
						return
					}
					if n := done.Add(1); n%100 == 0 {
						say(n)
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(fctx); err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	return nil
}

// floodSchedule cycles the flood traces, each copy under its own short
// system header so no two flood sessions share a page, until their unique
// tokens reach want.
func floodSchedule(p PinFloodParams, want int64) ([]floodSession, int64, int) {
	var out []floodSession
	var unique int64
	n := 0
	for cycle := 0; unique < want; cycle++ {
		for i, tr := range p.Flood {
			if unique >= want {
				break
			}
			name := fmt.Sprintf("flood-%d-%d", cycle, i)
			rs := Render(tr, RenderOptions{System: SystemBlock(name, 64), MaxMessageChars: p.FloodMessageChars, MaxRequests: p.FloodMaxRequests})
			if len(rs) == 0 {
				continue
			}
			last := rs[len(rs)-1]
			unique += int64(len(last.Prompt) + len(last.Output))
			n += len(rs)
			out = append(out, floodSession{name: name, requests: rs})
		}
		if cycle > 0 && len(out) == 0 {
			break // no flood trace renders to a request
		}
	}
	return out, unique, n
}

func pinFloodArm(ctx context.Context, rig *Rig, p PinFloodParams, arm string, vip []Request, flood []floodSession, requests int, prog Progress) (PinFloodArm, error) {
	var a PinFloodArm
	start, pinned := time.Now(), arm == "pinned"
	ttl, err := enginewire.ParseTTL(p.TTL)
	if err != nil {
		return a, fmt.Errorf("ttl %q: %w", p.TTL, err)
	}
	var lastPrefix []uint32
	for i := 0; i < p.WarmupTurns; i++ {
		prog.say("pin-flood %s: VIP warm-up turn %d/%d", arm, i+1, p.WarmupTurns)
		r := vip[i]
		tr := refengine.TurnRequest{Session: "vip", Tenant: tenant, Tokens: r.Prompt, Output: r.Output, Messages: r.Messages}
		if pinned {
			tr.CacheControl = &enginewire.CacheControl{Type: "ephemeral", TTL: ttl}
		}
		st, err := runTurn(ctx, rig.Engine, nil, tr)
		if err != nil {
			return a, fmt.Errorf("VIP turn %d: %w", i+1, err)
		}
		if pinned && !st.Pinned {
			return a, fmt.Errorf("VIP turn %d: cache_control did not pin", i+1)
		}
		a.PinnedBlocks = st.PinnedBlocks
		lastPrefix = r.seq()
	}
	full := len(lastPrefix) / p.PageSize * p.PageSize
	a.PrefixTokens = full
	if pinned {
		a.PinnedTokens = full
	}
	if err := rig.WaitSettled(ctx, 30*time.Second); err != nil {
		return a, err
	}

	floodStart := time.Now()
	if err := runFlood(ctx, rig, p, flood, func(done int64) {
		prog.say("pin-flood %s: flood %d/%d requests", arm, done, requests)
	}); err != nil {
		return a, err
	}
	a.FloodSeconds = time.Since(floodStart).Seconds()
	if err := rig.WaitSettled(ctx, 30*time.Second); err != nil {
		return a, err
	}

	r := vip[p.WarmupTurns]
	prefix := hashesOf(lastPrefix[:full], p.PageSize, tenant)
	res := rig.Residency(tenant, prefix)
	a.VIPDevicePages, a.VIPHostPages = res[tier.Device], res[tier.Host]
	prog.say("pin-flood %s: VIP turn %d", arm, p.WarmupTurns+1)
	st, err := rig.turn(ctx, "vip", tenant, r)
	if err != nil {
		return a, fmt.Errorf("VIP turn %d: %w", p.WarmupTurns+1, err)
	}
	a.PromptTokens, a.CachedTokens, a.PrefillTokens = st.Prompt, st.Cached, st.Prefilled
	a.TTFTms, a.LoadedPages, a.LoadedBytes = st.TTFTms, st.LoadedPages, st.LoadedBytes
	a.HitRate = ratio(st.Cached, st.Prompt)
	a.PrefixHit = ratio(min(st.Cached, a.PrefixTokens), a.PrefixTokens)
	a.PinnedHit = ratio(min(st.Cached, a.PinnedTokens), a.PinnedTokens) // 0 unpinned
	a.WallSeconds = time.Since(start).Seconds()
	return a, nil
}

// Charts: TTFT and hit rate per arm.
func (r *PinFloodReport) Charts() []Chart {
	b, p := r.Arms["baseline"], r.Arms["pinned"]
	return []Chart{
		{Title: "turn TTFT", Unit: "ms, modelled", Bars: []Bar{{"baseline", b.TTFTms}, {"pinned", p.TTFTms}}},
		{Title: "cache hit", Unit: "%", Bars: []Bar{{"baseline", 100 * b.HitRate}, {"pinned", 100 * p.HitRate}}},
	}
}
