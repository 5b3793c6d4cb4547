package agents

import (
	"math"
	"slices"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/host/bench/vllmserver"
)

// Quantiles of a sample, in milliseconds.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func quantilesOf(xs []float64) Quantiles {
	if len(xs) == 0 {
		return Quantiles{}
	}
	s := slices.Sorted(slices.Values(xs))
	at := func(q float64) float64 { return round(s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]) }
	return Quantiles{P50: at(0.5), P95: at(0.95), P99: at(0.99), Max: round(s[len(s)-1])}
}

func round(v float64) float64 { return math.Round(v*10) / 10 }

// Arm is what one arm's clients saw, and what its engine and host counted.
type Arm struct {
	Requests int `json:"requests"`
	// Failed counts requests not answered in full, ErrorsByKind by what
	// failed (the server's status and code, "stream" or "transport");
	// FirstErrors keeps a few of their messages.
	Failed       int            `json:"failed"`
	ErrorsByKind map[string]int `json:"errors_by_kind,omitempty"`
	FirstErrors  []string       `json:"first_errors,omitempty"`
	TTFTms       Quantiles      `json:"ttft_ms"`
	E2Ems        Quantiles      `json:"e2e_ms"`
	WallS        float64        `json:"wall_s"`
	RPS          float64        `json:"requests_per_s"`
	// PromptTokens and CachedTokens sum the answers' usage; Computed is
	// what the engine prefilled of them.
	PromptTokens   int `json:"prompt_tokens"`
	CachedTokens   int `json:"cached_tokens"`
	ComputedTokens int `json:"computed_tokens"`
	// CachedBy splits the cached tokens by where they came from, as vLLM
	// counts them at admission (a preempted request counts again): its own
	// prefix cache (device) and kvpilot's tiers. The reference engine's
	// cache is the host's device tier (arena mode): no split.
	CachedBy map[string]int `json:"cached_by,omitempty"`
	// Engine is vLLM's counters over the arm.
	Engine *vllmserver.Counters `json:"engine,omitempty"`
	// EditedRequests carried the front door's edits.
	EditedRequests int `json:"edited_requests"`
	// Answers: the greedy answers held to the reference's (vLLM).
	Answers *Agreement `json:"answers,omitempty"`
	// Host is the kvpilot host over the arm (its memory and tiers).
	Host *HostTrace `json:"host,omitempty"`
	// HostCounters are the host's counts by outcome (hostCounters).
	HostCounters map[string]float64 `json:"host_counters,omitempty"`
	// Fault is what the arm's fault did.
	Fault *FaultReport `json:"fault,omitempty"`
	// EngineKVBytes and HostPages are the arm's sizes.
	EngineKVBytes int64 `json:"engine_kv_bytes,omitempty"`
	EnginePages   int   `json:"engine_pages,omitempty"`
	HostPages     int   `json:"host_pages,omitempty"`
	// PerRequest is every request in the order it finished: what the
	// quantiles and the agreement are made of.
	PerRequest []Request `json:"per_request"`
}

// Request is one request of an arm as its client saw it.
type Request struct {
	Session int     `json:"session"`
	Turn    int     `json:"turn"`
	StartS  float64 `json:"start_s"`
	TTFTms  float64 `json:"ttft_ms"`
	E2Ems   float64 `json:"e2e_ms"`
	Prompt  int     `json:"prompt_tokens"`
	Cached  int     `json:"cached_tokens"`
	Edited  bool    `json:"edited,omitempty"`
	Answer  string  `json:"answer"`
	Error   string  `json:"error,omitempty"`
}

// Agreement counts the requests whose greedy answer is the reference's.
// Edited requests are left out: their prompt is not the reference's.
type Agreement struct {
	Compared int     `json:"compared"`
	Same     int     `json:"same"`
	Share    float64 `json:"share"`
}

// summarize fills an arm's client-side figures from its results.
func summarize(rs []result, wall time.Duration) Arm {
	a := Arm{Requests: len(rs), WallS: round(wall.Seconds()), ErrorsByKind: map[string]int{}}
	var ttft, e2e []float64
	for _, r := range rs {
		a.PerRequest = append(a.PerRequest, Request{Session: r.session, Turn: r.turn, StartS: round(r.start.Seconds()),
			TTFTms: r.chat.TTFTms, E2Ems: r.chat.E2Ems, Prompt: r.chat.Prompt, Cached: r.chat.Cached,
			Edited: r.chat.Cleared > 0, Answer: r.chat.Text, Error: r.err})
		if r.errKind != "" {
			a.Failed++
			a.ErrorsByKind[r.errKind]++
			if len(a.FirstErrors) < 5 {
				a.FirstErrors = append(a.FirstErrors, r.err)
			}
			continue
		}
		ttft, e2e = append(ttft, r.chat.TTFTms), append(e2e, r.chat.E2Ems)
		a.PromptTokens += r.chat.Prompt
		a.CachedTokens += r.chat.Cached
		if r.chat.Cleared > 0 {
			a.EditedRequests++
		}
	}
	a.ComputedTokens = a.PromptTokens - a.CachedTokens
	a.TTFTms, a.E2Ems = quantilesOf(ttft), quantilesOf(e2e)
	if wall > 0 {
		a.RPS = math.Round(float64(len(rs)-a.Failed)/wall.Seconds()*100) / 100
	}
	if len(a.ErrorsByKind) == 0 {
		a.ErrorsByKind = nil
	}
	return a
}

// agree holds an arm's answers to the reference's, request by request.
func agree(a *Arm, ref map[[2]int]string) {
	ag := &Agreement{}
	for _, r := range a.PerRequest {
		want, ok := ref[[2]int{r.Session, r.Turn}]
		if !ok || r.Error != "" || r.Edited {
			continue
		}
		ag.Compared++
		if r.Answer == want {
			ag.Same++
		}
	}
	if ag.Compared > 0 {
		ag.Share = math.Round(float64(ag.Same)/float64(ag.Compared)*1000) / 1000
	}
	a.Answers = ag
}

// Report is one run of `kvpilot bench agents`.
type Report struct {
	Scenario string `json:"scenario"`
	Params   Params `json:"params"`
	// WorkingSetTokens sums the sessions' longest prompts: what the
	// engine would hold to keep every session's history.
	WorkingSetTokens int            `json:"working_set_tokens"`
	Arms             map[string]Arm `json:"arms"`
	// NoiseFloor is how often the engine's own prefix cache changes a
	// greedy answer (the engine-small and engine-big arms against the
	// reference): what a kvpilot hit must match, not beat.
	NoiseFloor *Agreement `json:"noise_floor,omitempty"`
	// Reference is the reference pass's answer to each request, by
	// "session/turn".
	Reference map[string]string `json:"reference_answers,omitempty"`
	Targets   Targets           `json:"targets"`
	// Flood is the VIP session under the flood, per arm (--flood).
	Flood        map[string]*FloodVIP `json:"flood,omitempty"`
	FloodTargets *FloodTargets        `json:"flood_targets,omitempty"`
	Notes        []string             `json:"notes,omitempty"`
}

// Targets are the issue's: against the small engine alone, the kvpilot
// arm's TTFT p50 and p99 at most half; against the big engine, within
// 1.3x; no failed requests; answers no less often the reference's than
// the engine's own cache leaves them.
type Targets struct {
	P50VsSmall     float64 `json:"ttft_p50_vs_small"`
	P99VsSmall     float64 `json:"ttft_p99_vs_small"`
	P50VsBig       float64 `json:"ttft_p50_vs_big"`
	P99VsBig       float64 `json:"ttft_p99_vs_big"`
	NoFailures     bool    `json:"no_failed_requests"`
	AnswersAtNoise *bool   `json:"answers_at_noise_floor,omitempty"`
	Met            bool    `json:"met"`
}

func (r *Report) judge() {
	small, okS := r.Arms[ArmSmall]
	big, okB := r.Arms[ArmBig]
	kv, okK := r.Arms[ArmKvpilot]
	t := Targets{NoFailures: true}
	for _, a := range r.Arms {
		t.NoFailures = t.NoFailures && a.Failed == 0
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return math.Round(a/b*1000) / 1000
	}
	if okS && okK {
		t.P50VsSmall, t.P99VsSmall = ratio(kv.TTFTms.P50, small.TTFTms.P50), ratio(kv.TTFTms.P99, small.TTFTms.P99)
	}
	if okB && okK {
		t.P50VsBig, t.P99VsBig = ratio(kv.TTFTms.P50, big.TTFTms.P50), ratio(kv.TTFTms.P99, big.TTFTms.P99)
	}
	if r.NoiseFloor != nil && kv.Answers != nil {
		ok := kv.Answers.Share >= r.NoiseFloor.Share
		t.AnswersAtNoise = &ok
	}
	t.Met = okS && okB && okK && t.NoFailures && t.P50VsSmall <= 0.5 && t.P99VsSmall <= 0.5 &&
		t.P50VsBig <= 1.3 && t.P99VsBig <= 1.3 && (t.AnswersAtNoise == nil || *t.AnswersAtNoise)
	r.Targets = t
}

// Charts: each arm's TTFT over the run (a point per request, at the time
// it was sent), and the kvpilot arms' pages per tier over time.
func (r *Report) Charts() []scenario.Chart {
	ttft := scenario.Chart{Title: "TTFT over the run", Unit: "ms", XUnit: "s"}
	for _, name := range r.Params.Arms {
		a, ok := r.Arms[name]
		if !ok {
			continue
		}
		s := scenario.Series{Name: name}
		for _, x := range a.PerRequest {
			if x.Error == "" {
				s.Points = append(s.Points, scenario.Point{X: x.StartS, Y: x.TTFTms})
			}
		}
		slices.SortFunc(s.Points, func(a, b scenario.Point) int { return int(math.Copysign(1, a.X-b.X)) })
		ttft.Series = append(ttft.Series, s)
	}
	charts := []scenario.Chart{ttft}
	for _, name := range []string{ArmKvpilot, ArmPolicies} {
		a, ok := r.Arms[name]
		if !ok || a.Host == nil {
			continue
		}
		charts = append(charts, a.Host.chart(name))
	}
	return charts
}
