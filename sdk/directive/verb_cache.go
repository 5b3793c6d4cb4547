package directive

import pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"

// VerbCache is Cache's wire tag.
const VerbCache Verb = "Cache"

// Cache pins (Pin true) or unpins (Pin false) blocks. Pinning a block pins
// its ancestors. TTL is a kvpilot extension of the AgenticCommand format: absent or
// zero takes the host's default pin TTL.
type Cache struct {
	BlockHashes []Hash `json:"block_hashes"`
	Pin         bool   `json:"pin" wire:"required"`
	TTL         *TTL   `json:"ttl_seconds,omitempty"`
}

var cacheDef = define(verbSpec[Cache]{
	toProto: func(d Cache) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_Cache{Cache: &pb.Cache{BlockHashes: hashesToProto(d.BlockHashes), Pin: d.Pin, Ttl: TTLToProto(d.TTL)}}}
	},
	fromProto: func(m *pb.Directive) (Cache, error) {
		c := m.GetCache()
		t, err := TTLFromProto(c.GetTtl(), "Cache.ttl")
		return Cache{BlockHashes: hashesFromProto(c.GetBlockHashes()), Pin: c.GetPin(), TTL: t}, err
	},
})

func (Cache) Verb() Verb                     { return VerbCache }
func (Cache) isDirective()                   {}
func (d Cache) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Cache on its own.
func (d Cache) Validate(l Limits) error { return checkHashes("Cache", d.BlockHashes, l) }
