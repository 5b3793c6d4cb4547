package directive

import "strconv"

// Limits bound what one request may ask for. The zero value of each field
// takes the default below; the host fills them from its config.
type Limits struct {
	MaxPayload    int   // bytes of one JSON request (default 1 MiB)
	MaxDirectives int   // directives in one turn (default 256)
	MaxHashes     int   // hashes or keys in one directive (default 65536)
	MaxTokens     int   // token ids in one request or replacement (default 1<<20)
	MaxPosition   int64 // largest token position a span may name (default 1<<31)
	// SinkTokens is the protected attention-sink prefix: no edit (Splice,
	// Evict) may start before it. 0 protects nothing.
	SinkTokens int64
}

// Defaults for zero Limits fields.
const (
	DefaultMaxPayload    = 1 << 20
	DefaultMaxDirectives = 256
	DefaultMaxHashes     = 1 << 16
	DefaultMaxTokens     = 1 << 20
	DefaultMaxPosition   = 1 << 31
)

func (l Limits) maxPayload() int    { return orDefault(l.MaxPayload, DefaultMaxPayload) }
func (l Limits) maxDirectives() int { return orDefault(l.MaxDirectives, DefaultMaxDirectives) }
func (l Limits) maxHashes() int     { return orDefault(l.MaxHashes, DefaultMaxHashes) }
func (l Limits) maxTokens() int     { return orDefault(l.MaxTokens, DefaultMaxTokens) }
func (l Limits) maxPosition() int64 {
	if l.MaxPosition <= 0 {
		return DefaultMaxPosition
	}
	return l.MaxPosition
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func itoa(i int) string { return strconv.Itoa(i) }
