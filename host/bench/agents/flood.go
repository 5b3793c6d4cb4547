package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/host/bench/vllmserver"
	"github.com/kvpilot/kvpilot/sdk/chat"
)

// The flood (vLLM only): one VIP session asks questions about one long
// system prompt while the other sessions flood the engine with several
// times its KV memory of other prompts. vLLM alone keeps the VIP's prefix
// only while its LRU does; with kvpilot the VIP's requests pin their
// prefix (cache_control in kv_transfer_params, as the front door sends a
// cache_control breakpoint to a connector engine), on a host tier no
// larger than the flood would need to keep it without the pin.

// FloodVIP is the VIP session's report.
type FloodVIP struct {
	// PrefixTokens is the system prompt's tokens (vLLM's tokenizer);
	// PrefixHit is the share of its full pages the VIP's requests during
	// the flood found cached, on average.
	PrefixTokens int       `json:"prefix_tokens"`
	Requests     int       `json:"requests"`
	Failed       int       `json:"failed"`
	PrefixHit    float64   `json:"prefix_hit"`
	TTFTms       Quantiles `json:"ttft_ms"`
	// FloodTokens are the flood's prompt tokens, unique per session (its
	// sessions' longest prompts), against the engine's KV memory.
	FloodTokens  int     `json:"flood_tokens"`
	FloodFactor  float64 `json:"flood_factor"`
	EngineTokens int     `json:"engine_tokens"`
}

// floodVIPTokens is the VIP's system prompt, in the system block's words.
const floodVIPTokens = 2000

// vipQuestions are the VIP's requests: the same system prompt, a new
// question each.
var vipQuestions = []string{
	"Which tool should read a file?", "How do I run the tests?", "What must a patch include?",
	"When may I retry a command?", "Where do build errors go?", "How long may an answer be?",
	"What do I do before a commit?", "Which files may I edit?",
}

func vipMessages(system string, i int) []chat.Message {
	return []chat.Message{{Role: "system", Content: system}, {Role: "user", Content: vipQuestions[i%len(vipQuestions)]}}
}

// runFlood runs the flood on the small engine alone and with kvpilot.
func runFlood(ctx context.Context, p Params, ss []session, root string, prog scenario.Progress) (*Report, error) {
	system := scenario.SystemBlock("vip", floodVIPTokens)
	// Size from the flood sessions' prompts: a fresh engine tokenizes them.
	refDir := filepath.Join(root, "reference")
	if err := os.MkdirAll(refDir, 0o700); err != nil {
		return nil, err
	}
	_, longest, err := reference(ctx, p, ss, refDir, prog)
	if err != nil {
		return nil, err
	}
	flood, top := 0, 0
	for _, n := range longest {
		flood += n + 16
		top = max(top, n+16)
	}
	maxLen := (top + p.PageSize) / p.PageSize * p.PageSize
	engineTokens := maxLen + p.PageSize
	rep := &Report{Scenario: "agents-flood", Params: p, WorkingSetTokens: flood, Arms: map[string]Arm{}, Flood: map[string]*FloodVIP{}}
	for _, arm := range []string{ArmSmall, ArmKvpilot} {
		dir := filepath.Join(root, "flood-"+arm)
		vo := vllmserver.Options{Python: p.Python, PageSize: p.PageSize, KVBytes: int64(engineTokens) * vllmserver.TokenBytes,
			MaxModelLen: maxLen, MaxNumSeqs: min(len(ss)+1, 8), PrefixCaching: true, RetryAfterS: 0.5, Dir: dir}
		// The host tier holds twice the engine: a fraction of the flood.
		hostPages := 2 * engineTokens / p.PageSize
		a, vip, err := floodArm(ctx, p, arm, ss, system, dir, vo, hostPages, prog)
		if err != nil {
			return nil, fmt.Errorf("agents flood %s: %w", arm, err)
		}
		vip.FloodTokens, vip.EngineTokens = flood, engineTokens
		vip.FloodFactor = round(float64(flood) / float64(engineTokens))
		a.EngineKVBytes = vo.KVBytes
		rep.Arms[arm], rep.Flood[arm] = a, vip
	}
	small, kv := rep.Flood[ArmSmall], rep.Flood[ArmKvpilot]
	speedup := 0.0
	if kv.TTFTms.P50 > 0 {
		speedup = round(small.TTFTms.P50 / kv.TTFTms.P50)
	}
	rep.FloodTargets = &FloodTargets{PrefixHit: kv.PrefixHit, TTFTSpeedup: speedup,
		Met: kv.PrefixHit >= 0.99 && speedup >= 5 && kv.Failed == 0 && small.Failed == 0}
	return rep, nil
}

// FloodTargets: the pinned VIP hits >= 99% of its prefix through the
// flood, and its TTFT p50 is >= 5x better than vLLM alone's.
type FloodTargets struct {
	PrefixHit   float64 `json:"prefix_hit"`
	TTFTSpeedup float64 `json:"ttft_p50_speedup"`
	Met         bool    `json:"met"`
}

// floodArm runs the flood sessions and, beside them, the VIP: a warm-up
// request, then one request each time a tenth of the flood's requests
// are done.
func floodArm(ctx context.Context, p Params, arm string, ss []session, system, dir string, vo vllmserver.Options, hostPages int, prog scenario.Progress) (Arm, *FloodVIP, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Arm{}, nil, err
	}
	var extra map[string]any
	if arm == ArmKvpilot {
		h, err := startHost(ctx, p.Kvpilot, dir, floodHostConfig(p, hostPages))
		if err != nil {
			return Arm{}, nil, err
		}
		defer h.stop()
		vo.Socket = h.engineSocket()
		extra = map[string]any{"kv_transfer_params": map[string]any{"kvpilot": map[string]any{
			"session": "vip", "cache_control": map[string]any{"type": "ephemeral", "ttl": "1h"}}}}
	}
	say(prog, "agents flood %s: starting vLLM (%d MiB of KV)", arm, vo.KVBytes>>20)
	v, err := vllmserver.Start(ctx, vo)
	if err != nil {
		return Arm{}, nil, err
	}
	defer v.Close()
	url := v.URL + "/v1/chat/completions"
	vip := &FloodVIP{}
	if vip.PrefixTokens, err = tokenCount(ctx, v.URL, []chat.Message{{Role: "system", Content: system}}); err != nil {
		return Arm{}, nil, err
	}
	full := vip.PrefixTokens / p.PageSize * p.PageSize
	if _, err := scenario.StreamChatWith(ctx, url, vllmserver.Model, "vip", vipMessages(system, 0), extra); err != nil {
		return Arm{}, nil, fmt.Errorf("the VIP's warm-up: %w", err)
	}
	var (
		mu      sync.Mutex
		ttfts   []float64
		hits    float64
		asked   int
		pending sync.WaitGroup
	)
	total := requests(ss)
	ask := func() {
		defer pending.Done()
		mu.Lock()
		asked++
		i := asked
		mu.Unlock()
		r, err := scenario.StreamChatWith(ctx, url, vllmserver.Model, "vip", vipMessages(system, i), extra)
		mu.Lock()
		defer mu.Unlock()
		vip.Requests++
		if err != nil {
			vip.Failed++
			return
		}
		ttfts = append(ttfts, r.TTFTms)
		hits += float64(min(r.Cached, full)) / float64(max(full, 1))
	}
	say(prog, "agents flood %s: %d flood sessions, %d requests", arm, len(ss), total)
	rs, wall := drive(ctx, target{url: url, model: vllmserver.Model}, ss, time.Now(), func(done int) {
		if done%max(total/10, 1) == 0 {
			pending.Add(1)
			go ask()
		}
	})
	pending.Wait()
	if n := len(ttfts); n > 0 {
		vip.PrefixHit = round(hits/float64(n)*100) / 100
	}
	vip.TTFTms = quantilesOf(ttfts)
	return summarize(rs, wall), vip, nil
}

// floodHostConfig is the flood's host: connector mode, a host tier of
// hostPages and no disk tier, so the flood overflows it too.
func floodHostConfig(p Params, hostPages int) map[string]any {
	return map[string]any{
		"index":  map[string]any{"page_size": p.PageSize},
		"engine": map[string]any{"tokenizer": ""},
		"tiers": map[string]any{
			"device": map[string]any{"capacity_pages": stagingPages},
			"host":   map[string]any{"capacity_pages": hostPages},
			"disk":   map[string]any{"capacity_pages": 0},
			"remote": map[string]any{"capacity_pages": 0},
		},
		"http": map[string]any{"listen": ""}, "nats": map[string]any{"listen": ""},
		"log": map[string]any{"level": "warn"}, "policies": []any{},
	}
}

// tokenCount is vLLM's token count of msgs under its chat template (POST
// /tokenize, beside /v1).
func tokenCount(ctx context.Context, base string, msgs []chat.Message) (int, error) {
	body, _ := json.Marshal(map[string]any{"model": vllmserver.Model, "messages": msgs, "add_generation_prompt": false})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("tokenize: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Count int `json:"count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("tokenize: status %d: %v", resp.StatusCode, err)
	}
	return out.Count, nil
}
