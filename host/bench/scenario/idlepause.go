package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/policies/idlepause"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// IdlePauseParams shape the idle-pause scenario: Sessions agent sessions
// (real traces behind one shared system block) run Turns turns each; the
// last Sessions-Idle of them keep working while the first Idle go quiet
// past the idle-pause policy's idle_after; then the idle ones come back.
type IdlePauseParams struct {
	Traces []Trace `json:"-"`
	Shape

	Sessions        int    `json:"sessions"`
	Idle            int    `json:"idle"`
	Turns           int    `json:"turns"`
	MaxMessageChars int    `json:"max_message_chars"`
	IdleAfter       string `json:"idle_after"`
}

func (p *IdlePauseParams) defaults() {
	p.Shape.defaults()
	p.Sessions = cmp.Or(p.Sessions, 32)
	p.Idle = cmp.Or(p.Idle, p.Sessions*3/4)
	p.Turns = cmp.Or(p.Turns, 4)
	p.MaxMessageChars = cmp.Or(p.MaxMessageChars, 2000)
	p.IdleAfter = cmp.Or(p.IdleAfter, "10m")
}

// IdlePauseArm is one arm: what the idle sessions held on the device once
// the host was at rest, and what their return cost.
type IdlePauseArm struct {
	// DevicePages is every page on the device at rest after the idle
	// sessions were handled; IdleDevicePages those only idle sessions use.
	DevicePages      int     `json:"device_pages"`
	IdleDevicePages  int     `json:"idle_device_pages"`
	DeviceBytesFreed int64   `json:"device_bytes_freed"`
	PausedSessions   int     `json:"paused_sessions"`
	PausedPages      int     `json:"paused_pages"`
	SettleMs         float64 `json:"settle_ms"`
	// Resume: the idle sessions' next turns, summed.
	ResumePromptTokens  int     `json:"resume_prompt_tokens"`
	ResumeCachedTokens  int     `json:"resume_cached_tokens"`
	ResumePrefillTokens int     `json:"resume_prefill_tokens"`
	ResumeLoadedBytes   int64   `json:"resume_loaded_bytes"`
	HitRate             float64 `json:"hit_rate"`
	// ResumeTTFTms is the modelled TTFT per returning session (mean);
	// ResumeWallMs the measured wall time of its turn on this machine,
	// real disk load-back included (mean).
	ResumeTTFTms float64 `json:"resume_ttft_ms"`
	ResumeWallMs float64 `json:"resume_wall_ms"`
}

// IdlePauseReport is the scenario's result. Arms: keep (idle sessions stay
// on the device), pause (the idle-pause policy's leases, resumed on
// return), drop (paused then revoked: purged, so the return re-prefills).
type IdlePauseReport struct {
	Scenario  string                  `json:"scenario"`
	Params    IdlePauseParams         `json:"params"`
	PageBytes int64                   `json:"page_bytes"`
	Arms      map[string]IdlePauseArm `json:"arms"`
	// DeviceFreedFraction is the share of the keep arm's device pages the
	// pause arm freed; ResumeVsReprefill is the drop arm's resume TTFT over
	// the pause arm's.
	DeviceFreedFraction float64 `json:"device_freed_fraction"`
	ResumeVsReprefill   float64 `json:"resume_vs_reprefill"`
	SystemPrefix        string  `json:"system_prefix"`
}

var idlePauseArms = []string{"keep", "pause", "drop"}

// RunIdlePause runs the three arms, each on a fresh host.
func RunIdlePause(ctx context.Context, p IdlePauseParams, prog Progress) (*IdlePauseReport, error) {
	p.defaults()
	if len(p.Traces) == 0 {
		return nil, fmt.Errorf("idle-pause: at least one trace is required")
	}
	if p.Idle < 1 || p.Idle >= p.Sessions {
		return nil, fmt.Errorf("idle-pause: idle %d: want 1..%d (some sessions must stay active)", p.Idle, p.Sessions-1)
	}
	idleAfter, err := time.ParseDuration(p.IdleAfter)
	if err != nil {
		return nil, fmt.Errorf("idle-pause: idle_after %q: %w", p.IdleAfter, err)
	}
	system := SystemBlock("agent", p.SystemTokens)
	sessions := make([][]Request, p.Sessions)
	total := 0
	for i := range sessions {
		tr := p.Traces[i%len(p.Traces)]
		sessions[i] = Render(tr, RenderOptions{System: system, Tag: fmt.Sprintf("session %d", i), MaxMessageChars: p.MaxMessageChars, MaxRequests: p.Turns + 1})
		if len(sessions[i]) < p.Turns+1 {
			return nil, fmt.Errorf("idle-pause: trace %s has %d requests, need %d", tr.SessionID, len(sessions[i]), p.Turns+1)
		}
		last := sessions[i][p.Turns]
		total += len(last.Prompt) + len(last.Output)
	}
	// The device (and host and disk) holds every session with room to
	// spare: the point is memory held by idle sessions, not eviction.
	p.DevicePages = cmp.Or(p.DevicePages, total/p.PageSize*2+256)
	rep := &IdlePauseReport{Scenario: "idle-pause", Params: p,
		SystemPrefix: fmt.Sprintf("one deterministic %d-token system block shared by every session", p.SystemTokens)}
	o := p.rig()
	o.DiskPages, o.SkipContract, o.PauseTier = p.DevicePages, true, "disk"
	rep.Arms, err = runArms(ctx, "idle-pause", idlePauseArms, func(string) RigOptions { return o }, func(rig *Rig, arm string) (IdlePauseArm, error) {
		l := rig.Engine.Layout()
		rep.PageBytes = int64(l.PageBytes())
		return idlePauseArm(ctx, rig, p, arm, idleAfter, sessions, prog)
	})
	if err != nil {
		return nil, err
	}
	keep := rep.Arms["keep"]
	for _, arm := range []string{"pause", "drop"} {
		a := rep.Arms[arm]
		a.DeviceBytesFreed = int64(keep.DevicePages-a.DevicePages) * rep.PageBytes
		rep.Arms[arm] = a
	}
	rep.DeviceFreedFraction = ratio(keep.DevicePages-rep.Arms["pause"].DevicePages, keep.DevicePages)
	if t := rep.Arms["pause"].ResumeTTFTms; t > 0 {
		rep.ResumeVsReprefill = rep.Arms["drop"].ResumeTTFTms / t
	}
	return rep, nil
}

func idlePauseArm(ctx context.Context, rig *Rig, p IdlePauseParams, arm string, idleAfter time.Duration, sessions [][]Request, prog Progress) (IdlePauseArm, error) {
	var a IdlePauseArm
	pol := idlepause.New()
	params, _ := json.Marshal(map[string]any{"idle_after": p.IdleAfter})
	if err := pol.Configure(params); err != nil {
		return a, fmt.Errorf("configure idle-pause: %w", err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	observe := func(obs policy.Observation) ([]policy.Directive, error) {
		obs.Time, obs.Tenant = now, tenant
		return pol.Observe(ctx, obs)
	}
	// turn runs request k of session i with its observations; what the
	// policy answers to them is returned, not applied.
	turn := func(i, k int) (refengine.TurnStats, []policy.Directive, error) {
		r := sessions[i][k]
		id := fmt.Sprintf("s%d", i)
		out, err := observe(started(id, k, r.Prompt, r.Messages, p.PageSize))
		if err != nil {
			return refengine.TurnStats{}, nil, err
		}
		st, err := rig.turn(ctx, id, tenant, r)
		if err != nil {
			return st, nil, err
		}
		now = now.Add(time.Second)
		fin, err := observe(policy.Observation{Kind: policy.KindRequestFinished, Session: id, Finished: &policy.RequestFinished{
			RequestID: fmt.Sprintf("%s/%d", id, k), Usage: policy.Usage{InputTokens: int64(len(r.Prompt)), CachedTokens: int64(st.Cached), OutputTokens: int64(len(r.Output))},
			BlockHashes: hashesOf(r.seq(), p.PageSize, tenant)}})
		now = now.Add(time.Second)
		return st, append(out, fin...), err
	}

	for k := 0; k < p.Turns; k++ {
		for i := range sessions {
			prog.say("idle-pause %s: turn %d/%d of session %d", arm, k+1, p.Turns, i)
			if _, _, err := turn(i, k); err != nil {
				return a, err
			}
		}
	}
	// The active sessions carry on past idle_after; the idle ones do not.
	now = now.Add(idleAfter + time.Minute)
	active := map[uint64]bool{}
	for i := p.Idle; i < p.Sessions; i++ {
		if _, _, err := turn(i, p.Turns); err != nil {
			return a, err
		}
		for _, h := range hashesOf(sessions[i][p.Turns].seq(), p.PageSize, tenant) {
			active[h] = true
		}
	}
	ds, err := observe(policy.Observation{Kind: policy.KindTick, Tick: &policy.Tick{Interval: 10 * time.Second}})
	if err != nil {
		return a, err
	}
	var leases []string
	for _, d := range ds {
		_, inner := policy.Unwrap(d)
		if pz, ok := inner.(directive.Pause); ok {
			a.PausedSessions++
			a.PausedPages += len(pz.BlockHashes)
			leases = append(leases, pz.LeaseID)
		}
	}
	settle := time.Now()
	if arm != "keep" {
		if err := rig.ApplyPolicy(ctx, idlepause.Name, ds); err != nil {
			return a, err
		}
		if arm == "drop" {
			for _, l := range leases {
				if _, err := rig.Apply(ctx, "bench", tenant, directive.RevokeLease{LeaseID: l}); err != nil {
					return a, err
				}
			}
		}
	}
	if arm == "pause" {
		if err := rig.WaitLeasesSettled(ctx, leases, 60*time.Second); err != nil {
			return a, err
		}
	}
	if err := rig.WaitSettled(ctx, 60*time.Second); err != nil {
		return a, err
	}
	a.SettleMs = float64(time.Since(settle).Microseconds()) / 1e3
	a.DevicePages = rig.Stats().Tiers[tier.Device].Pages
	for i := 0; i < p.Idle; i++ {
		own := slices.DeleteFunc(hashesOf(sessions[i][p.Turns-1].seq(), p.PageSize, tenant), func(h uint64) bool { return active[h] })
		a.IdleDevicePages += rig.Residency(tenant, own)[tier.Device]
	}

	// The idle sessions come back.
	now = now.Add(5 * time.Minute)
	var wall time.Duration
	for i := 0; i < p.Idle; i++ {
		prog.say("idle-pause %s: session %d returns", arm, i)
		t0 := time.Now()
		st, ds, err := turn(i, p.Turns)
		if err != nil {
			return a, err
		}
		wall += time.Since(t0)
		if arm == "pause" {
			// The policy resumes the lease when it sees the session back
			// (after the request matched, as the host observes it).
			if err := rig.ApplyPolicy(ctx, idlepause.Name, ds); err != nil {
				return a, err
			}
		}
		a.ResumePromptTokens += st.Prompt
		a.ResumeCachedTokens += st.Cached
		a.ResumePrefillTokens += st.Prefilled
		a.ResumeLoadedBytes += st.LoadedBytes
		a.ResumeTTFTms += st.TTFTms
	}
	a.ResumeTTFTms /= float64(p.Idle)
	a.ResumeWallMs = float64(wall.Microseconds()) / 1e3 / float64(p.Idle)
	a.HitRate = ratio(a.ResumeCachedTokens, a.ResumePromptTokens)
	return a, nil
}

// Charts: device pages held and resume TTFT per arm.
func (r *IdlePauseReport) Charts() []Chart {
	return []Chart{
		{Title: "device pages at rest", Bars: barsOf(idlePauseArms, func(n string) float64 { return float64(r.Arms[n].DevicePages) })},
		{Title: "resume TTFT", Unit: "ms, modelled", Bars: barsOf(idlePauseArms, func(n string) float64 { return r.Arms[n].ResumeTTFTms })},
	}
}
