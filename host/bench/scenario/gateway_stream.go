package scenario

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// readChatStream reads an OpenAI stream: the time to its first chunk, the
// usage and kvpilot's extension in its usage chunk, the applied edits of
// its first chunk, the answer's text; an error event fails it.
func readChatStream(r io.Reader, start time.Time) (ChatResult, error) {
	var res ChatResult
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	first := true
	var text strings.Builder
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if first {
			res.TTFTms = float64(time.Since(start).Microseconds()) / 1e3
		}
		if line == "[DONE]" {
			res.Text = text.String()
			return res, nil
		}
		var c struct {
			chatwire.Response
			Error             *chatwire.ErrorDetail `json:"error"`
			ContextManagement *struct {
				AppliedEdits []struct {
					ClearedToolUses int `json:"cleared_tool_uses"`
				} `json:"applied_edits"`
			} `json:"context_management"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return res, fmt.Errorf("chunk: %w", err)
		}
		if c.Error != nil {
			return res, fmt.Errorf("stream error: %s", c.Error.Message)
		}
		if first && c.ContextManagement != nil {
			for _, a := range c.ContextManagement.AppliedEdits {
				res.Cleared += a.ClearedToolUses
			}
		}
		first = false
		for _, ch := range c.Choices {
			if ch.Delta != nil && ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
		}
		if c.Usage != nil {
			res.Prompt, res.Cached = c.Usage.PromptTokens, c.Usage.Cached()
			var st refengine.Stats
			if json.Unmarshal(c.KVPilot, &st) == nil {
				res.ModelledMs = st.TTFTms
			}
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	return res, io.ErrUnexpectedEOF
}

// WriteTable prints the arms.
func (r *GatewayReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	pj, _ := json.Marshal(r.Params.Policy)
	fmt.Fprintf(tw, "gateway: %d real sessions resent in full through the front door (OpenAI streaming) to the reference engine; edits: truncation %s\n\n",
		len(r.Sessions), pj)
	fmt.Fprintf(tw, "arm\trequests\tedited\tprompt tokens\tcached\tprefill (+fills)\tedit cost\tTTFT p50 / p90 / mean (HTTP)\tmodelled TTFT\tcontract\n")
	for _, name := range gatewayArms {
		a := r.Arms[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d (+%d)\t%d\t%.1f / %.1f / %.1f ms\t%.1f s\t%s\n", name, a.Requests, a.EditedRequests, a.PromptTokens,
			a.CachedTokens, a.PrefillTokens, a.FillTokens, r.EditCost[name], a.TTFTms.P50, a.TTFTms.P90, a.TTFTms.Mean, a.ModelledTTFTs, okWord(a.ContractOK))
	}
	fmt.Fprintf(tw, "\nedit cost = an arm's prefill (fills included) beyond the prefix-cache arm's, which never edits\n")
	fmt.Fprintf(tw, "splice saved %.1f%% of the re-prefill arm's edit cost (target >= %.0f%%): met=%v\n", 100*r.Saved, 100*r.Targets.SavedMin, r.Targets.Met)
	return tw.Flush()
}

// Charts: prefill and mean TTFT per arm.
func (r *GatewayReport) Charts() []Chart {
	return []Chart{
		{Title: "prefill tokens", Unit: "tokens", Bars: barsOf(gatewayArms, func(n string) float64 { return float64(r.Arms[n].PrefillTokens) })},
		{Title: "TTFT through HTTP, mean", Unit: "ms", Bars: barsOf(gatewayArms, func(n string) float64 { return r.Arms[n].TTFTms.Mean })},
	}
}
