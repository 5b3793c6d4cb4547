// Package agents is `kvpilot bench agents`: many agent sessions at once,
// each a client that resends its whole history every turn (streamed) and
// then waits a seeded tool time, against an engine whose KV memory is
// smaller than the sessions' working set. The same requests, in the same
// order per session, go to each arm on a fresh engine:
//
//   - engine-small: the engine alone, its own prefix cache, a fifth of the
//     working set's KV memory;
//   - engine-big: the engine alone with memory for the whole working set
//     (the ceiling a bigger GPU buys);
//   - kvpilot: the small engine with kvpilot's tiers behind it (the host
//     tier sized to the working set), no edits;
//   - kvpilot-policies: the same through the front door with the four
//     built-in policies (their edits spliced, the guard's defaults).
//
// On vLLM (vllm.go) the engine is vLLM's CPU build serving SmolLM2 and a
// reference pass (every request alone, no cache) gives the greedy answers
// each arm is held to; the kvpilot arms' host is a `kvpilot serve`
// process that a fault (SIGKILL or SIGTERM, then a restart) can hit in the
// middle of the load. On the reference engine (refengine.go) the same load
// runs in seconds with modelled prefill times, for CI.
package agents

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// Engines.
const (
	EngineVLLM = "vllm"
	EngineRef  = "refengine"
)

// Arms, in the order they run.
const (
	ArmSmall    = "engine-small"
	ArmBig      = "engine-big"
	ArmKvpilot  = "kvpilot"
	ArmPolicies = "kvpilot-policies"
)

// Arms is every arm, in order.
var Arms = []string{ArmSmall, ArmBig, ArmKvpilot, ArmPolicies}

// Faults a kvpilot arm's host can meet in the middle of the load.
const (
	FaultNone    = ""
	FaultSIGKILL = "sigkill"
	FaultSIGTERM = "sigterm"
)

// Params shape one run.
type Params struct {
	Engine   string `json:"engine"`
	Sessions int    `json:"sessions"`
	// Turns is each session's requests at most.
	Turns int `json:"turns"`
	// SystemTokens sizes the system block every session shares; a line
	// naming the session follows it, so sessions share nothing past it.
	SystemTokens int `json:"system_tokens"`
	// MessageBytes cuts every message of the traces, so a session fits
	// the engine's context.
	MessageBytes int `json:"message_bytes"`
	// ToolTime is the mean wait between a session's turns (seeded,
	// uniform within half of it either way).
	ToolTime time.Duration `json:"tool_time_ns"`
	// KVFraction is the small arms' engine memory as a share of the
	// working set.
	KVFraction float64 `json:"kv_fraction"`
	// Arms to run (default: every arm).
	Arms []string `json:"arms"`
	// Flood runs the flood instead of the arms (vLLM only): one VIP
	// session's pinned prefix against the other sessions' prompts at
	// several times the engine's KV memory (flood.go).
	Flood bool `json:"flood,omitempty"`
	// Fault hits the kvpilot arms' host once half the requests are done
	// (vLLM only: the reference engine's host runs in this process).
	Fault string `json:"fault,omitempty"`
	// FaultDown is how long the host stays down after the fault.
	FaultDown time.Duration `json:"fault_down_ns,omitempty"`
	PageSize  int           `json:"page_size"`
	Seed      uint64        `json:"seed"`
	// TimeScale: the reference engine waits its modelled TTFT times this.
	TimeScale float64 `json:"time_scale,omitempty"`

	// Python runs vLLM; Kvpilot is the binary the host runs; Workdir keeps
	// the hosts' data and the engines' logs (default: a temporary one,
	// removed).
	Python  string `json:"-"`
	Kvpilot string `json:"-"`
	Workdir string `json:"-"`
	// Traces are the sessions' traces, used round-robin.
	Traces []scenario.Trace `json:"-"`
}

// Defaults of the two engines: vLLM on two cores reads SmolLM2 at a few
// thousand tokens a second, so its sessions are shorter and fewer.
func (p *Params) defaults() {
	p.Engine = cmp.Or(p.Engine, EngineRef)
	vllm := p.Engine == EngineVLLM
	p.Sessions = cmp.Or(p.Sessions, 8)
	if vllm {
		p.Turns = cmp.Or(p.Turns, 6)
		p.SystemTokens = cmp.Or(p.SystemTokens, 600)
		p.MessageBytes = cmp.Or(p.MessageBytes, 1200)
		p.ToolTime = cmp.Or(p.ToolTime, time.Second)
		p.PageSize = cmp.Or(p.PageSize, 32)
	} else {
		p.Turns = cmp.Or(p.Turns, 8)
		p.SystemTokens = cmp.Or(p.SystemTokens, 2000)
		p.MessageBytes = cmp.Or(p.MessageBytes, 3000)
		p.ToolTime = cmp.Or(p.ToolTime, 20*time.Millisecond)
		p.PageSize = cmp.Or(p.PageSize, 16)
		p.TimeScale = cmp.Or(p.TimeScale, 0.2)
	}
	p.KVFraction = cmp.Or(p.KVFraction, 0.2)
	p.FaultDown = cmp.Or(p.FaultDown, time.Second)
	p.Seed = cmp.Or(p.Seed, 1)
	if len(p.Arms) == 0 {
		p.Arms = Arms
	}
}

func (p *Params) validate() error {
	if p.Engine != EngineVLLM && p.Engine != EngineRef {
		return fmt.Errorf("agents: engine %q: want %s or %s", p.Engine, EngineVLLM, EngineRef)
	}
	if p.Sessions < 1 || p.Sessions > 64 {
		return fmt.Errorf("agents: %d sessions: want 1 to 64", p.Sessions)
	}
	for _, a := range p.Arms {
		if !slices.Contains(Arms, a) {
			return fmt.Errorf("agents: arm %q: want one of %v", a, Arms)
		}
	}
	switch p.Fault {
	case FaultNone:
	case FaultSIGKILL, FaultSIGTERM:
		if p.Engine != EngineVLLM {
			return fmt.Errorf("agents: --fault %s needs --engine vllm (the reference engine's host runs in this process)", p.Fault)
		}
	default:
		return fmt.Errorf("agents: fault %q: want %s or %s", p.Fault, FaultSIGKILL, FaultSIGTERM)
	}
	if p.Flood && p.Engine != EngineVLLM {
		return fmt.Errorf("agents: --flood needs --engine vllm (bench pin-flood is the reference engine's)")
	}
	if len(p.Traces) == 0 {
		return fmt.Errorf("agents: at least one trace is required")
	}
	if p.KVFraction <= 0 || p.KVFraction > 1 {
		return fmt.Errorf("agents: kv fraction %g: want (0, 1]", p.KVFraction)
	}
	return nil
}

// session is one client's script: its requests in order and the tool time
// after each.
type session struct {
	id    string
	turns []scenario.Turn
	tool  []time.Duration
}

// sessions builds the clients' scripts: traces round-robin, each behind the
// shared system block and a line of its own, cut to MessageBytes, with
// seeded tool times.
func (p *Params) sessions() []session {
	block := scenario.SystemBlock("agents", p.SystemTokens)
	r := rand.New(rand.NewPCG(p.Seed, 0x6167656e7473))
	out := make([]session, p.Sessions)
	for i := range out {
		tr := scenario.CutTrace(p.Traces[i%len(p.Traces)], p.MessageBytes)
		id := fmt.Sprintf("agent-%02d", i)
		system := fmt.Sprintf("%s\n\nYou are agent %d of %d, session %s.", block, i+1, p.Sessions, id)
		s := session{id: id, turns: scenario.ChatTurns(tr, system, p.Turns)}
		for range s.turns {
			half := float64(p.ToolTime) / 2
			s.tool = append(s.tool, time.Duration(half+r.Float64()*2*half))
		}
		out[i] = s
	}
	return out
}

// requests counts the sessions' requests.
func requests(ss []session) int {
	n := 0
	for _, s := range ss {
		n += len(s.turns)
	}
	return n
}
