package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/host/blockid"
)

func TestHashCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"hash", "--block-size", "4", "--namespace", "acme", "0..8", "42"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("want exactly one line of JSON, got %q", out.String())
	}
	var got blockid.Hashes
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := blockid.Compute([]uint32{0, 1, 2, 3, 4, 5, 6, 7, 42}, 4, blockid.Salt{Namespace: "acme"})
	if !slices.Equal(got.Local, want.Local) || !slices.Equal(got.Sequence, want.Sequence) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestHashCommandEmptyIsArrays(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"hash", "--block-size", "4", "1", "2"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if got := strings.TrimSpace(out.String()); got != `{"local":[],"sequence":[]}` {
		t.Fatalf("got %s", got)
	}
}

func TestHashCommandErrors(t *testing.T) {
	for _, args := range [][]string{
		{"hash", "1", "2"},                          // no block size
		{"hash", "--block-size", "4", "x"},          // not a token
		{"hash", "--block-size", "4", "5..2"},       // reversed range
		{"hash", "--block-size", "4", "-3"},         // negative
		{"hash", "--block-size", "4", "4294967296"}, // over u32
		{"hash", "--block-size", "4", "0..99999999999"},
		{"hash", "--nope"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code == 0 {
			t.Errorf("%v: exit 0, want failure", args)
		}
		if out.Len() != 0 {
			t.Errorf("%v: wrote %q to stdout on failure", args, out.String())
		}
		if errOut.Len() == 0 {
			t.Errorf("%v: no explanation on stderr", args)
		}
	}
}

func TestParseTokensRanges(t *testing.T) {
	got, err := parseTokens([]string{"3..6", "9", "7..7"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []uint32{3, 4, 5, 9}) {
		t.Fatalf("got %v", got)
	}
}
