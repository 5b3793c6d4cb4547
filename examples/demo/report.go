package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

// report is the three passes: prefix cache, prefix cache + edits,
// kvpilot + policies, and the engine behind them.
type report struct {
	engine string
	passes []*result
}

// savedMin is the demo's target: kvpilot saves at least this share of
// what the prefix cache spends re-prefilling after the same edits.
const savedMin = 0.8

// savings compares the passes' prefill with the unedited prefix cache's:
// what the edits cost a prefix cache (re-prefill after each) and kvpilot
// (its splices' replacements), and the share kvpilot saves.
func (r *report) savings() (reprefill, splice int64, saved float64) {
	return r.savingsOf(r.passes[2])
}

// savingsOf is savings for kvpilot's pass p.
func (r *report) savingsOf(p *result) (reprefill, splice int64, saved float64) {
	base := r.passes[0].prefill()
	reprefill = r.passes[1].prefill() - base
	splice = p.prefill() - base
	if reprefill > 0 {
		saved = 1 - float64(splice)/float64(reprefill)
	}
	return reprefill, splice, saved
}

// agreement compares the splice's greedy answers (kvpilot's pass) with
// the re-prefill's (the prefix cache given the same edits), request by
// request: how many of those after an edit are the same text, of how
// many; and the same over every request.
func (r *report) agreement() (sameEdited, edited, same, all int) {
	return agreementOf(r.passes[1], r.passes[2])
}

// agreementOf is agreement between the re-prefill pass ref and pass p
// (the requests after an edit are p's).
func agreementOf(ref, p *result) (sameEdited, edited, same, all int) {
	re, sp := ref.answers, p.answers
	for i := range min(len(re), len(sp)) {
		eq := re[i].text == sp[i].text
		all++
		if eq {
			same++
		}
		if sp[i].edited {
			edited++
			if eq {
				sameEdited++
			}
		}
	}
	return sameEdited, edited, same, all
}

// contractOK: every pass's engine checked its cached rows (a violation
// fails the request, and the pass). Only the reference engine checks.
func (r *report) contractOK() bool {
	for _, p := range r.passes {
		if p.engine.CheckedRows == 0 {
			return false
		}
	}
	return true
}

func (r *report) write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nkvpilot demo: real agent sessions resent in full through the front door (OpenAI API) to %s, three times\n\n", engineName(r.engine))
	fmt.Fprintf(tw, "\t%s\t%s\t%s\n", r.passes[0].name, r.passes[1].name, r.passes[2].name)
	row := func(label string, f func(*result) string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", label, f(r.passes[0]), f(r.passes[1]), f(r.passes[2]))
	}
	row("requests", func(p *result) string { return fmt.Sprint(p.requests) })
	row("prompt tokens (the model's context)", func(p *result) string { return fmt.Sprint(p.prompt) })
	row("cached tokens", func(p *result) string {
		return fmt.Sprintf("%d (%.1f%%)", p.cached, 100*float64(p.cached)/float64(max(1, p.prompt)))
	})
	row("prefilled tokens (+ splice fills)", func(p *result) string { return fmt.Sprintf("%d (+%d)", p.prompt-p.cached, p.fillTokens) })
	if r.engine == engineRef {
		row("TTFT through HTTP / modelled, all requests", func(p *result) string {
			return fmt.Sprintf("%.1f s / %.1f s", p.ttftMs/1e3, p.modelledMs/1e3)
		})
	} else {
		row("TTFT through HTTP, all requests (this CPU)", func(p *result) string { return fmt.Sprintf("%.1f s", p.ttftMs/1e3) })
	}
	row("engine got edited requests (stubs, thinking cleared)", func(p *result) string {
		u := p.upstream
		return fmt.Sprintf("%d of %d (%d, %d)", u.EditedRequests, u.Requests, u.StubbedResults, u.Cleared)
	})
	if r.engine == engineRef {
		row("keys checked against the contract", func(p *result) string {
			return fmt.Sprintf("%d (%d rotated)", p.engine.CheckedRows, p.engine.RoundedRows)
		})
	}
	row("idle session's return: cached", func(p *result) string {
		return fmt.Sprintf("%d/%d", p.idleReturn.Cached, p.idleReturn.Prompt)
	})
	if err := tw.Flush(); err != nil {
		return err
	}
	r.writeDirectives(tw, r.passes[2])
	re, sp, saved := r.savings()
	pol := r.passes[2]
	paused := 0
	for _, d := range pol.directives {
		if d.Verb == "Pause" && d.Status == "ok" {
			paused += d.Effect.Blocks
		}
	}
	fmt.Fprintf(tw, "\ndevice memory idle-pause moved to the disk tier: %d pages (%.1f MiB at %d bytes a page)\n", paused, float64(int64(paused)*pol.pageBytes)/(1<<20), pol.pageBytes)
	fmt.Fprintf(tw, "the edits cost a prefix cache %d prefilled tokens (re-prefill after each); kvpilot %d (splice fills and partial pages)\n", re, sp)
	if r.engine == engineRef {
		fmt.Fprintf(tw, "prefill saved: %d tokens, %.1f%% of the prefix cache's (target >= %.0f%%: met=%v); contract checked on every cached row: %v\n",
			re-sp, 100*saved, 100*savedMin, saved >= savedMin && re > 0, r.contractOK())
		return tw.Flush()
	}
	sameEdited, edited, same, all := r.agreement()
	fmt.Fprintf(tw, "prefill saved: %d tokens, %.1f%% of the prefix cache's (target >= %.0f%%: met=%v)\n",
		re-sp, 100*saved, 100*savedMin, saved >= savedMin && re > 0)
	fmt.Fprintf(tw, "the splice's greedy answer (16 tokens) is the re-prefill's: %d of %d requests after an edit (%d of %d in all)\n",
		sameEdited, edited, same, all)
	if len(r.passes) == 5 {
		r.writeComparison(tw)
	}
	return tw.Flush()
}

// writeComparison puts the defaults' agreement beside kvpilot's without
// recompute and the re-prefill's with itself (passConfigs' compare).
func (r *report) writeComparison(w io.Writer) {
	def, off, again := r.passes[2], r.passes[3], r.passes[4]
	line := func(what string, p *result) {
		se, e, _, _ := agreementOf(r.passes[1], p)
		fmt.Fprintf(w, "  %s: %d of %d after an edit", what, se, e)
		if p.splices {
			_, sp, saved := r.savingsOf(p)
			fmt.Fprintf(w, ", %d tokens prefilled for the edits (%.1f%% saved), TTFT %.1f s", sp, 100*saved, p.ttftMs/1e3)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "greedy answers equal to the re-prefill's:")
	line("kvpilot with the defaults (splice.recompute.first: 64 through the front door)", def)
	line("kvpilot without recompute (splice.recompute.first: 0)", off)
	line("the re-prefill run again (the noise floor)", again)
}

type auditRecord struct {
	Source string `json:"source"`
	Verb   string `json:"verb"`
	Status string `json:"status"`
	Code   string `json:"code"`
	Effect struct {
		Blocks int   `json:"blocks"`
		Tokens int64 `json:"tokens"`
	} `json:"effect"`
}

func readAudit(path string) ([]auditRecord, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []auditRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 16<<20)
	for sc.Scan() {
		var r auditRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Verb != "" {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// writeDirectives tabulates a pass's audit log by source, verb and status.
func (r *report) writeDirectives(tw *tabwriter.Writer, pol *result) {
	type key struct{ source, verb, status string }
	type agg struct {
		n, blocks int
		tokens    int64
		codes     map[string]int
	}
	by := map[key]*agg{}
	for _, d := range pol.directives {
		k := key{d.Source, d.Verb, d.Status}
		a := by[k]
		if a == nil {
			a = &agg{codes: map[string]int{}}
			by[k] = a
		}
		a.n++
		a.blocks += d.Effect.Blocks
		a.tokens += d.Effect.Tokens
		if d.Code != "" {
			a.codes[d.Code]++
		}
	}
	keys := make([]key, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.source+"\x00"+a.verb+"\x00"+a.status < b.source+"\x00"+b.verb+"\x00"+b.status
	})
	fmt.Fprintf(tw, "\ndirectives in the audit log (%s)\n\nsource\tverb\tstatus\tcount\tblocks\ttokens\tcodes\n", pol.name)
	for _, k := range keys {
		a := by[k]
		var codes []string
		for c, n := range a.codes {
			codes = append(codes, fmt.Sprintf("%s x%d", c, n))
		}
		sort.Strings(codes)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", k.source, k.verb, k.status, a.n, a.blocks, a.tokens, strings.Join(codes, ", "))
	}
	if len(keys) == 0 {
		fmt.Fprintf(tw, "(none)\n")
	}
}
