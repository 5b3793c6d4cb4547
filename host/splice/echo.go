package splice

// Echo: kept tokens that repeat the text a splice removed.
//
// A kept token's K/V were computed while the removed text was in context.
// Where the kept text repeats it (an answer that paraphrases the reasoning
// stripped before it, a tool output quoted again after the truncated
// original), attention could copy from the removed copy, and the next turn,
// which often quotes the same text, reads those rows. Their staleness (how
// far their rows are from a re-prefill's) understates what they cost the
// answers, so the engine's quality guard weighs it more (kvbench's
// splice-quality measured the edit where this decides the guard's curve).

// EchoGram is the length of the token runs echo compares: long enough that
// chat-template and code boilerplate rarely match by chance.
const EchoGram = 8

// echoes marks, over edited[lo:hi], the positions inside a run of EchoGram
// tokens of edited[lo:hi] that one of removed also holds. The result is
// indexed from lo.
func echoes(edited []uint32, lo, hi int, removed [][]uint32) []bool {
	hi = min(hi, len(edited))
	if lo < 0 || hi-lo < EchoGram {
		return nil
	}
	type gram [EchoGram]uint32
	seen := map[gram]struct{}{}
	for _, r := range removed {
		for s := 0; s+EchoGram <= len(r); s++ {
			seen[gram(r[s:s+EchoGram])] = struct{}{}
		}
	}
	if len(seen) == 0 {
		return nil
	}
	out := make([]bool, hi-lo)
	for s := lo; s+EchoGram <= hi; s++ {
		if _, ok := seen[gram(edited[s:s+EchoGram])]; ok {
			for q := s; q < s+EchoGram; q++ {
				out[q-lo] = true
			}
		}
	}
	return out
}
