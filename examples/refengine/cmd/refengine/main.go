// Command refengine runs kvpilot's reference engine against a host: it
// registers a GQA or MLA layout, replays synthetic multi-turn sessions
// (each turn's prompt is the previous prompt, its answer and a new user
// message), checks the splice contract on every cached key it is handed, and
// prints the totals and the cost model as JSON.
//
//	refengine --socket kvpilot-data/run/engine.sock --model gqa --sessions 4 --turns 5
//
// With --listen it serves an OpenAI-compatible HTTP API instead
// (POST /v1/chat/completions, GET /v1/models; see refengine.Server) and the
// host's fill orders, until interrupted; it prints the address it listens
// on as its first line of output, then the totals when it stops.
//
//	refengine --socket kvpilot-data/run/engine.sock --listen 127.0.0.1:8000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "refengine:", err)
		os.Exit(1)
	}
}

func run() error {
	socket := flag.String("socket", "kvpilot-data/run/engine.sock", "the host's engine socket")
	model := flag.String("model", "gqa", "gqa or mla")
	pageSize := flag.Int("page-size", 64, "tokens per page (the host's index.page_size)")
	sessions := flag.Int("sessions", 4, "sessions to replay")
	turns := flag.Int("turns", 5, "turns per session")
	userTokens := flag.Int("user-tokens", 200, "tokens of each new user message")
	answerTokens := flag.Int("answer-tokens", 100, "tokens of each answer")
	ttl := flag.String("cache-ttl", "", "send cache_control {type: ephemeral, ttl} on every request (e.g. 5m)")
	listen := flag.String("listen", "", "serve the OpenAI-compatible HTTP API on this address instead of replaying")
	modelName := flag.String("model-name", "", "the model name the HTTP API serves (default: the layout's, ref-gqa or ref-mla)")
	timeScale := flag.Float64("time-scale", 0, "HTTP: wait the modelled TTFT times this before answering (0: at once)")
	flag.Parse()

	cfg := refengine.Config{Socket: *socket, Cost: refengine.DefaultCost}
	switch *model {
	case "gqa":
		cfg.Model = refengine.GQA(*pageSize)
	case "mla":
		cfg.Model = refengine.MLA(*pageSize)
	default:
		return fmt.Errorf("--model %q: want gqa or mla", *model)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	e, err := refengine.New(rctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer e.Close()
	if *listen != "" {
		return serveHTTP(ctx, e, *listen, refengine.ServerOptions{ModelName: *modelName, TimeScale: *timeScale})
	}
	cc := ""
	if *ttl != "" {
		cc = fmt.Sprintf(`{"cache_control":{"type":"ephemeral","ttl":%q}}`, *ttl)
	}
	var next uint32 = 1000
	fresh := func(n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = next
			next++
		}
		return out
	}
	for s := 0; s < *sessions; s++ {
		var prompt []uint32
		for t := 0; t < *turns; t++ {
			prompt = append(prompt, fresh(*userTokens)...)
			answer := fresh(*answerTokens)
			st, err := e.Run(ctx, refengine.TurnRequest{Session: fmt.Sprintf("session-%d", s), Tokens: prompt, Output: answer, CacheControlJSON: cc})
			if err != nil {
				return fmt.Errorf("session %d turn %d: %w", s, t, err)
			}
			fmt.Fprintf(os.Stderr, "session %d turn %d: prompt %d cached %d prefilled %d ttft %.1f ms\n", s, t, st.Prompt, st.Cached, st.Prefilled, st.TTFTms)
			prompt = append(prompt, answer...)
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"model": cfg.Model, "cost": cfg.Cost, "totals": e.Totals(), "registration": e.Client().Registration()})
}
