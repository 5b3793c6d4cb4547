package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvpilot/kvpilot/host/blockid"
)

func init() {
	registerCommand(command{
		Name:    "hash",
		Summary: "print the local and sequence block hashes of a token sequence",
		Run:     runHash,
	})
}

func runHash(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("hash", "--block-size N [--lora NAME] [--namespace NS] TOKENS...",
		"Prints {\"local\":[...],\"sequence\":[...]} for every full page of TOKENS, the\n"+
			"same hashes Dynamo routers and kvpilot events use. TOKENS are\n"+
			"integers or ranges a..b (a inclusive, b exclusive); a trailing partial page\n"+
			"is not hashed.\n\nExample: kvpilot hash --block-size 4 0..8 42", stderr)
	blockSize := fs.Int("block-size", 0, "tokens per page (required, > 0)")
	lora := fs.String("lora", "", "LoRA adapter name salting the hashes (empty: none)")
	namespace := fs.String("namespace", "", "cache namespace (tenant) salting the hashes (empty: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *blockSize <= 0 {
		fmt.Fprintf(stderr, "kvpilot hash: --block-size must be a positive integer, got %d\n", *blockSize)
		return errUsage
	}
	tokens, err := parseTokens(fs.Args())
	if err != nil {
		return usageError(fs, err)
	}
	h := blockid.Compute(tokens, *blockSize, blockid.Salt{LoRA: *lora, Namespace: *namespace})
	if h.Local == nil {
		h.Local, h.Sequence = []uint64{}, []uint64{}
	}
	out, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode hashes: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}

// maxRangeTokens bounds what one a..b argument may expand to, so a typo such
// as 0..4000000000 fails fast instead of allocating gigabytes.
const maxRangeTokens = 1 << 24

// parseTokens reads token arguments: integers, or ranges a..b with a
// inclusive and b exclusive. Tokens are u32.
func parseTokens(args []string) ([]uint32, error) {
	var out []uint32
	for _, a := range args {
		lo, hi, isRange := strings.Cut(a, "..")
		if !isRange {
			t, err := parseToken(a)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
			continue
		}
		a0, err := parseToken(lo)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", a, err)
		}
		b0, err := parseToken(hi)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", a, err)
		}
		if b0 < a0 {
			return nil, fmt.Errorf("range %q: end %d is before start %d (ranges are a..b with a <= b)", a, b0, a0)
		}
		if b0-a0 > maxRangeTokens || len(out)+int(b0-a0) > maxRangeTokens {
			return nil, fmt.Errorf("range %q: more than %d tokens in all", a, maxRangeTokens)
		}
		for t := a0; t < b0; t++ {
			out = append(out, t)
		}
	}
	return out, nil
}

func parseToken(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("token %q is not an integer in 0..4294967295", s)
	}
	return uint32(v), nil
}
