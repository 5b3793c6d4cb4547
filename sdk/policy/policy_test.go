package policy

import (
	"errors"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy/internal/wire"
)

func TestNegotiate(t *testing.T) {
	for _, c := range []struct {
		host, plugin []uint32
		want         uint32
	}{
		{[]uint32{1}, nil, 1},
		{[]uint32{1, 2}, []uint32{2, 3}, 2},
		{[]uint32{2}, []uint32{1}, 0},
	} {
		if got := negotiate(c.host, c.plugin); got != c.want {
			t.Fatalf("negotiate(%v, %v) = %d, want %d", c.host, c.plugin, got, c.want)
		}
	}
}

func TestDecodeParams(t *testing.T) {
	var p struct {
		D directive.TTL `json:"d"`
		N int           `json:"n"`
	}
	if err := DecodeParams([]byte(`{"d":"5m","n":2}`), &p); err != nil || p.D.Duration() != 5*time.Minute || p.N != 2 {
		t.Fatalf("%+v %v", p, err)
	}
	if err := DecodeParams([]byte(`{"d":90}`), &p); err != nil || p.D.Duration() != 90*time.Second {
		t.Fatalf("%+v %v", p, err)
	}
	if err := DecodeParams([]byte(`{"typo":1}`), &p); err == nil {
		t.Fatal("unknown key accepted")
	}
	if err := DecodeParams([]byte(`{"d":"-1s"}`), &p); err == nil {
		t.Fatal("negative duration accepted")
	}
}

func TestRunRefusesWithoutHost(t *testing.T) {
	t.Setenv(wire.Handshake.MagicCookieKey, "")
	if err := Run(nil); !errors.Is(err, ErrNotLaunchedByHost) {
		t.Fatalf("err %v", err)
	}
}
