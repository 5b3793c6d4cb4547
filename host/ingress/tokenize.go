package ingress

import (
	"fmt"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

// tokenizeReplacements turns the text replacements of a turn's splices into
// token ids with the host's tokenizer, so the executor can apply them;
// without a tokenizer the turn goes as it is and the executor refuses text
// as not_supported_yet. The turn's directives are copied, not edited in
// place: the door's turn may be shared.
func (g *Ingress) tokenizeReplacements(t *directive.Turn) error {
	if g.cfg.Tokenize == nil {
		return nil
	}
	var out []directive.Directive
	for i, dir := range t.Directives {
		sp, ok := dir.(directive.Splice)
		if !ok || sp.Replacement.Text == "" {
			continue
		}
		toks, err := g.cfg.Tokenize(sp.Replacement.Text)
		if err != nil {
			return fmt.Errorf("tokenize the replacement of directive %d: %w", i, err)
		}
		if out == nil {
			out = append([]directive.Directive(nil), t.Directives...)
		}
		sp.Replacement = directive.Replacement{Tokens: toks}
		out[i] = sp
	}
	if out != nil {
		t.Directives = out
	}
	return nil
}
