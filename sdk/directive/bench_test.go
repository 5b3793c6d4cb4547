package directive

import (
	"encoding/json"
	"testing"
)

func BenchmarkDecodeCommand(b *testing.B) {
	data := []byte(`{"type": "Pause", "block_hashes": [666, 777], "ttl_seconds": 3600, "lease_id": "session-abc"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCommand(data, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeCacheControl(b *testing.B) {
	data := []byte(seedCacheControl)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCacheControl(data, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateTurn(b *testing.B) {
	t := Turn{Tenant: "acme", Directives: []Directive{
		Cache{BlockHashes: []Hash{1, 2, 3}, Pin: true},
		Splice{Session: "s", Start: 10, End: 20, Replacement: Replacement{Text: "x"}},
		Evict{Session: "s", Start: 30, End: 40},
		Pin{Session: "s", End: 8},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if err := ValidateTurn(t, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeTurnCache is what a host decodes for bench control's NATS
// arm: a one-directive turn as the Go client encodes it.
func BenchmarkDecodeTurnCache(b *testing.B) {
	data, err := json.Marshal(Turn{Directives: []Directive{Cache{BlockHashes: []Hash{1234567890123}, Pin: true}}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeTurn(data, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
