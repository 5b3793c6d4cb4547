package directive

import (
	"errors"
	"math"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

func TestValidateTurn(t *testing.T) {
	ok := Cache{BlockHashes: []Hash{1}, Pin: true}
	sp := func(s string, a, b int64) Splice { return Splice{Session: s, Start: a, End: b} }
	ins := func(s string, at int64) Splice {
		return Splice{Session: s, Start: at, End: at, Replacement: Replacement{Text: "x"}}
	}
	for _, tc := range []struct {
		name   string
		turn   Turn
		limits Limits
		code   errcode.Code // "" = valid
		index  int          // directive the error names (-1: the turn)
	}{
		{"single ok", Turn{Directives: []Directive{ok}}, Limits{}, "", 0},
		{"empty turn", Turn{}, Limits{}, errcode.MissingField, -1},
		{"too many", Turn{Directives: []Directive{ok, ok, ok}}, Limits{MaxDirectives: 2}, errcode.TooMany, -1},
		{"nil directive", Turn{Directives: []Directive{ok, nil}}, Limits{}, errcode.BadRequest, 1},
		{"bad tenant", Turn{Tenant: "a\x00b", Directives: []Directive{ok}}, Limits{}, errcode.BadRequest, -1},
		{"empty hashes", Turn{Directives: []Directive{ok, Cache{Pin: true}}}, Limits{}, errcode.MissingField, 1},
		{"too many hashes", Turn{Directives: []Directive{Cache{BlockHashes: []Hash{1, 2, 3}}}}, Limits{MaxHashes: 2}, errcode.TooMany, 0},
		{"bad tier", Turn{Directives: []Directive{Warm{BlockKeys: []BlockKey{"1"}, TargetTier: "L9"}}}, Limits{}, errcode.InvalidTier, 0},
		{"bad key", Turn{Directives: []Directive{Warm{BlockKeys: []BlockKey{"a\nb"}, TargetTier: "host"}}}, Limits{}, errcode.InvalidHash, 0},
		{"no lease", Turn{Directives: []Directive{Pause{BlockHashes: []Hash{1}}}}, Limits{}, errcode.MissingField, 0},
		{"dup lease", Turn{Directives: []Directive{Pause{BlockHashes: []Hash{1}, LeaseID: "l"}, Pause{BlockHashes: []Hash{2}, LeaseID: "l"}}}, Limits{}, errcode.LeaseExists, 1},
		{"bad priority", Turn{Directives: []Directive{Retain{Session: "s", End: 4, Priority: 101}}}, Limits{}, errcode.InvalidPriority, 0},
		{"start after end", Turn{Directives: []Directive{sp("s", 5, 4)}}, Limits{}, errcode.InvalidSpan, 0},
		{"negative", Turn{Directives: []Directive{sp("s", -1, 4)}}, Limits{}, errcode.InvalidSpan, 0},
		{"empty splice", Turn{Directives: []Directive{sp("s", 4, 4)}}, Limits{}, errcode.InvalidSpan, 0},
		{"beyond max", Turn{Directives: []Directive{sp("s", 0, 100)}}, Limits{MaxPosition: 50}, errcode.InvalidSpan, 0},
		{"bad mode", Turn{Directives: []Directive{Splice{Session: "s", Start: 1, End: 2, Mode: "rewind"}}}, Limits{}, errcode.BadRequest, 0},
		{"no session", Turn{Directives: []Directive{Evict{Start: 1, End: 2}}}, Limits{}, errcode.MissingField, 0},
		{"bad scope", Turn{Directives: []Directive{Share{Session: "s", End: 2, Scope: "world"}}}, Limits{}, errcode.BadRequest, 0},
		{"insertion ok", Turn{Directives: []Directive{ins("s", 4)}}, Limits{}, "", 0},
		{"disjoint edits", Turn{Directives: []Directive{sp("s", 0, 4), sp("s", 4, 8), ins("s", 8)}}, Limits{}, "", 0},
		{"overlap", Turn{Directives: []Directive{sp("s", 0, 5), sp("s", 4, 8)}}, Limits{}, errcode.OverlappingSpans, 1},
		{"overlap evict", Turn{Directives: []Directive{Evict{Session: "s", Start: 10, End: 20}, sp("s", 15, 16)}}, Limits{}, errcode.OverlappingSpans, 1},
		{"other session", Turn{Directives: []Directive{sp("s", 0, 5), sp("t", 0, 5)}}, Limits{}, "", 0},
		{"same insertion point", Turn{Directives: []Directive{ins("s", 4), ins("s", 4)}}, Limits{}, errcode.OverlappingSpans, 1},
		{"insertion inside", Turn{Directives: []Directive{sp("s", 0, 8), ins("s", 4)}}, Limits{}, errcode.OverlappingSpans, 1},
		{"insertion at edge", Turn{Directives: []Directive{sp("s", 0, 8), ins("s", 8)}}, Limits{}, "", 0},
		{"pin over edit", Turn{Directives: []Directive{Pin{Session: "s", End: 100}, sp("s", 50, 60)}}, Limits{}, errcode.OverlappingSpans, 1},
		{"pin before edit", Turn{Directives: []Directive{Pin{Session: "s", End: 50}, sp("s", 50, 60)}}, Limits{}, "", 0},
		{"pin and retain overlap", Turn{Directives: []Directive{Pin{Session: "s", End: 100}, Retain{Session: "s", Start: 0, End: 100, Priority: 5}}}, Limits{}, "", 0},
		{"sink", Turn{Directives: []Directive{sp("s", 2, 6)}}, Limits{SinkTokens: 4}, errcode.SinkProtected, 0},
		{"sink insertion", Turn{Directives: []Directive{ins("s", 3)}}, Limits{SinkTokens: 4}, errcode.SinkProtected, 0},
		{"after sink", Turn{Directives: []Directive{sp("s", 4, 6)}}, Limits{SinkTokens: 4}, "", 0},
		{"first failure wins", Turn{Directives: []Directive{ok, sp("s", 0, 5), sp("s", 1, 2), Cache{}}}, Limits{}, errcode.OverlappingSpans, 2},
	} {
		err := ValidateTurn(tc.turn, tc.limits)
		if tc.code == "" {
			if err != nil {
				t.Errorf("%s: unexpected %v", tc.name, err)
			}
			continue
		}
		te, isTurn := err.(*TurnError)
		if !isTurn {
			t.Errorf("%s: got %v (%T), want *TurnError %s", tc.name, err, err, tc.code)
			continue
		}
		if te.Err.Code != tc.code || te.Err.Index != tc.index {
			t.Errorf("%s: got %v (index %d), want %s at %d", tc.name, te.Err, te.Err.Index, tc.code, tc.index)
		}
		if tc.index >= 0 && (len(te.Each) != len(tc.turn.Directives) || te.Each[tc.index] == nil) {
			t.Errorf("%s: Each %v does not mark directive %d", tc.name, te.Each, tc.index)
		}
	}
}

func TestVerbsComplete(t *testing.T) {
	seen := map[Verb]bool{}
	for _, v := range Verbs {
		if seen[v] || !v.Known() {
			t.Errorf("verb %q duplicated or unknown", v)
		}
		seen[v] = true
	}
	if len(Verbs) != 13 {
		t.Errorf("%d verbs, want 13", len(Verbs))
	}
	if !VerbSplice.IsSpan() || VerbCache.IsSpan() {
		t.Error("IsSpan wrong")
	}
}

func TestSpliceRecomputeValidate(t *testing.T) {
	sp := func(r *Recompute, m Mode) Splice {
		return Splice{Session: "s", Start: 4, End: 9, Recompute: r, Mode: m}
	}
	for _, tc := range []struct {
		d  Splice
		ok bool
	}{
		{sp(&Recompute{First: 64, Share: 0.2, MaxKL: 0.005}, ""), true},
		{sp(&Recompute{}, ModeForget), true}, // empty: nothing asked
		{sp(&Recompute{First: -1}, ""), false},
		{sp(&Recompute{Share: 1.5}, ""), false},
		{sp(&Recompute{Share: math.NaN()}, ""), false},
		{sp(&Recompute{MaxKL: -0.1}, ""), false},
		{sp(&Recompute{MaxKL: math.Inf(1)}, ""), false},
		{sp(&Recompute{First: 8}, ModeForget), false},
	} {
		err := tc.d.Validate(Limits{})
		if (err == nil) != tc.ok {
			t.Errorf("%+v: got %v, want ok=%v", *tc.d.Recompute, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errcode.ErrBadRequest) {
			t.Errorf("%+v: %v is not bad_request", *tc.d.Recompute, err)
		}
	}
}
