package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Engine is the host's view of the engine behind the front door, for an
// engine that serves no fill orders (vLLM with kvpilot's KV connector).
// There the host's session diff cannot run (the connector sends tokens,
// not message spans) and a splice cannot have its replacement prefilled,
// so the front door does both around the request that carries a new edit:
//
//  0. it waits, up to gateway.await_saves, until the host holds the
//     session's previous request in full pages (the connector saves them
//     behind the response; a splice planned before keeps fewer);
//  1. it tokenizes the edited messages with the engine's own chat template
//     (vLLM: POST /tokenize, beside /v1);
//  2. it diffs them against the session's cached sequence
//     (splice.DiffGrown): one edit [Start, End) of the old sequence
//     becomes new[Start:F];
//  3. it sends the engine a prefill-only request (POST /v1/completions,
//     the token IDs new[:B] as the prompt, max_tokens 1, the tenant but no
//     session in kv_transfer_params) where B is the first page boundary at
//     or after F plus the tenant's splice.recompute.first (Config.
//     RecomputeFirst; within the prompt's last page): the engine computes
//     the replacement's pages, and the kept tokens up to B afresh, and the
//     connector saves them (it saves full prompt pages only);
//  4. it waits until the host holds those pages on its device tier: vLLM's
//     connector saves on a background thread, so the response can come
//     back before the pages are committed, and a splice planned then finds
//     nothing to adopt and keeps nothing after the edit (with the save
//     held back half a second, none of the demo's splices kept a page);
//  5. it brings the session's cached pages back onto the device tier: the
//     splicer moves only rows that are there, and a connector's device
//     tier is a staging area that keeps a page only while it is in
//     flight, so a session that waited behind others, or that idle-pause
//     moved to disk, would keep only what is still staged;
//  6. it has the host free a device page for each page the splice will
//     move (a busy engine's staging tier sits just under its high
//     watermark), then submits a Splice of the session: the splicer
//     adopts the pages the prefill cached and moves the old branch after
//     them by the edit's Δ, re-rotating their keys;
//  7. it forwards the request, whose prefix the engine then loads from
//     kvpilot up to the end of the old branch: only the new turn is
//     prefilled.
//
// Any step that fails leaves the request as it would be without it: the
// engine prefills everything after the edit.
type Engine interface {
	// PrefillPage is the index's page size when the registered engine
	// needs the front door to prefill its splices' replacements; ok is
	// false for an engine that fills them itself (or none registered).
	PrefillPage() (page int, ok bool)
	// SessionTokens is the session's cached sequence, and how many of its
	// tokens are in cached pages; ok is false for a session the host does
	// not know in tenant.
	SessionTokens(tenant, session string) (tokens []uint32, cached int, ok bool)
	// StagedPages is how many leading full pages of tokens the host holds
	// for tenant on its device tier, where a splice adopts and moves pages.
	StagedPages(tenant string, tokens []uint32) int
	// Stage brings the pages of tokens that the host holds for tenant on
	// colder tiers back onto its device tier, within ctx.
	Stage(ctx context.Context, tenant string, tokens []uint32) error
	// MakeRoom frees pages slots on the device tier for a splice's fresh
	// pages, evicting what the tier's policy lets it, within ctx.
	MakeRoom(ctx context.Context, pages int)
}

// savedWait bounds step 4's wait for the prefill's pages. A save lands
// milliseconds after the response on an idle machine; one that has not
// landed within this was most likely skipped by the connector (its save
// queue or the staging tier full), and the request re-prefills instead.
const (
	savedWait = 2 * time.Second
	savedPoll = 2 * time.Millisecond
)

// tokenizeFields are the chat request's fields that decide its prompt's
// tokens (vLLM's TokenizeChatRequest takes them all).
var tokenizeFields = []string{"model", "messages", "tools", "chat_template", "chat_template_kwargs",
	"add_generation_prompt", "continue_final_message", "add_special_tokens"}

// prefillEdits runs steps 1 to 4 for a turn with a new edit. raw is the
// body about to be forwarded (edited messages included).
func (s *Server) prefillEdits(ctx context.Context, t *turn, raw map[string]json.RawMessage) {
	if s.cfg.Engine == nil || s.dirs == nil || len(t.out.Fresh) == 0 {
		return
	}
	page, ok := s.cfg.Engine.PrefillPage()
	if !ok || page <= 0 {
		return
	}
	s.awaitSaves(ctx, t, page)
	old, cached, ok := s.cfg.Engine.SessionTokens(t.tenant, t.sess.id)
	if !ok || cached < page {
		return
	}
	log := s.cfg.Log.With("session", t.sess.id, "tenant", t.tenant)
	toks, err := s.tokenize(ctx, raw)
	if err != nil {
		log.Warn("edit not spliced: tokenizing the edited messages failed", "error", err)
		s.countEngineSplice(outcomeTokenize, 0)
		return
	}
	e, ok := splice.DiffGrown(old[:min(cached, len(old))], toks)
	if !ok {
		return
	}
	f := e.Start + len(e.Replacement)
	end := (f + page - 1) / page * page
	if end >= len(toks) {
		return // the request's own prefill reaches no kept token
	}
	if first := s.recomputeFirst(t.tenant); first > 0 {
		// The kept tokens right after the edit are the stalest: prefilled
		// here, the splice adopts them fresh (never the prompt's last page,
		// which the request itself prefills).
		end = max(end, min((f+first+page-1)/page*page, (len(toks)-1)/page*page))
	}
	prefilled := 0
	if end > e.Start/page*page {
		if err := s.prefill(ctx, raw["model"], toks[:end], t.tenant); err != nil {
			log.Warn("edit not spliced: the prefill request failed", "error", err)
			s.countEngineSplice(outcomePrefill, 0)
			return
		}
		prefilled = end - e.Start/page*page // from the page the edit starts in: no prefix cache holds it
		if !s.awaitStaged(ctx, t.tenant, toks[:end], page) {
			log.Warn("edit not spliced: the engine did not save the prefill's pages in time", "pages", end/page, "waited", savedWait)
			s.countEngineSplice(outcomeUnsaved, prefilled)
			return
		}
	}
	if err := s.cfg.Engine.Stage(ctx, t.tenant, old[:cached]); err != nil {
		// The splice then keeps the rows that are on the device tier.
		log.Warn("the session's cached pages did not all come back to the device tier before its splice", "error", err)
	}
	// The splice takes a fresh device page for each page it moves, from
	// the page the edit starts in to the end of what is cached: on a busy
	// engine the staging tier sits just under its high watermark, with
	// fewer free pages than that.
	s.cfg.Engine.MakeRoom(ctx, (cached-e.Start/page*page+page-1)/page+1)
	sp := directive.Splice{Session: t.sess.id, Start: int64(e.Start), End: int64(e.End),
		Replacement: directive.Replacement{Tokens: e.Replacement}}
	reply := s.dirs.Submit(ctx, t.tenant, []directive.Directive{sp})
	if reply.Status != directive.StatusOK {
		log.Warn("edit not spliced: the splice was refused", "error", reply.Error)
		s.countEngineSplice(outcomeSplice, prefilled)
		return
	}
	s.countEngineSplice(outcomeSpliced, prefilled)
	t.recomputed = end - f
	moved := int64(0)
	if len(reply.Results) > 0 {
		moved = reply.Results[0].Effect.Tokens
	}
	log.Debug("edit spliced", "start", e.Start, "end", e.End, "replacement", len(e.Replacement), "prefilled_to", end,
		"kept", cached-e.End, "moved", moved)
}

// awaitStaged waits until the host holds every full page of tokens on its
// device tier, for at most savedWait; it reports whether it does.
func (s *Server) awaitStaged(ctx context.Context, tenant string, tokens []uint32, page int) bool {
	want := len(tokens) / page
	deadline := time.Now().Add(savedWait)
	for s.cfg.Engine.StagedPages(tenant, tokens) < want {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(savedPoll):
		}
	}
	return true
}

// noteUsage records the prompt tokens the engine counted for t's request:
// the next turn of the session waits for their saves (awaitSaves).
func (s *Server) noteUsage(t *turn, u *chatwire.Usage) {
	if u != nil && u.PromptTokens > 0 {
		s.sessions.setPrompt(t.sess.key, u.PromptTokens)
	}
}

// awaitSaves waits, up to Config.AwaitSaves, until the host holds the
// session's previous request in full pages: its connector saves behind
// the response, and a splice planned before the saves land keeps only the
// pages already saved (the engine prefills the rest).
func (s *Server) awaitSaves(ctx context.Context, t *turn, page int) {
	want := t.sess.prompt / page * page
	if s.cfg.AwaitSaves <= 0 || want == 0 {
		return
	}
	saved := func() bool {
		_, cached, ok := s.cfg.Engine.SessionTokens(t.tenant, t.sess.id)
		return ok && cached >= want
	}
	start := time.Now()
	outcome := outcomeReady
	for !saved() {
		outcome = outcomeWaited
		if time.Since(start) >= s.cfg.AwaitSaves || ctx.Err() != nil {
			outcome = outcomeGaveUp
			s.cfg.Log.Debug("splicing before the previous turn's saves landed", "session", t.sess.id, "tokens", want, "waited", s.cfg.AwaitSaves)
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(savedPoll):
		}
	}
	if m := s.cfg.Metrics; m != nil {
		m.SaveWaits.WithLabelValues(outcome).Inc()
		m.SaveWaitSeconds.Add(time.Since(start).Seconds())
	}
}

func (s *Server) recomputeFirst(tenant string) int {
	if s.cfg.RecomputeFirst == nil {
		return 0
	}
	return s.cfg.RecomputeFirst(tenant)
}

// tokenize asks the engine for the prompt tokens of the chat request raw.
func (s *Server) tokenize(ctx context.Context, raw map[string]json.RawMessage) ([]uint32, error) {
	req := make(map[string]json.RawMessage, len(tokenizeFields))
	for _, k := range tokenizeFields {
		if v, ok := raw[k]; ok {
			req[k] = v
		}
	}
	if _, ok := req["add_generation_prompt"]; !ok {
		req["add_generation_prompt"] = json.RawMessage("true")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode tokenize request: %w", err)
	}
	resp, e := s.up.send(ctx, http.MethodPost, s.up.root()+"/tokenize", body)
	if e != nil {
		return nil, fmt.Errorf("POST /tokenize: %w", e.err)
	}
	defer resp.Body.Close()
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&out); err != nil {
		return nil, fmt.Errorf("POST /tokenize: unreadable answer: %w", err)
	}
	return out.Tokens, nil
}

// prefill has the engine compute tokens as a prompt of no session and
// waits until it answered (the connector has saved the pages by then).
func (s *Server) prefill(ctx context.Context, model json.RawMessage, tokens []uint32, tenant string) error {
	params, _ := json.Marshal(chatwire.KVParams{Tenant: tenant})
	body, err := json.Marshal(map[string]any{
		"model": model, "prompt": tokens, "max_tokens": 1, "temperature": 0,
		"kv_transfer_params": map[string]json.RawMessage{"kvpilot": params},
	})
	if err != nil {
		return fmt.Errorf("encode prefill request: %w", err)
	}
	resp, e := s.up.do(ctx, http.MethodPost, "/completions", body)
	if e != nil {
		return fmt.Errorf("POST /completions: %w", e.err)
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return err
}

// Outcomes of a front-door splice, for kvpilot_gateway_engine_splices_total.
const (
	outcomeSpliced  = "spliced"
	outcomeTokenize = "tokenize"
	outcomePrefill  = "prefill"
	outcomeUnsaved  = "unsaved"
	outcomeSplice   = "splice"
)

// The outcomes of awaitSaves (kvpilot_gateway_save_waits_total).
const (
	outcomeReady  = "ready"
	outcomeWaited = "waited"
	outcomeGaveUp = "gave_up"
)

func (s *Server) countEngineSplice(outcome string, prefilled int) {
	if m := s.cfg.Metrics; m != nil {
		m.EngineSplices.WithLabelValues(outcome).Inc()
		m.PrefilledTokens.Add(float64(prefilled))
	}
}
