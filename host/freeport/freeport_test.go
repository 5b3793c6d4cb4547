package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsAreDistinctFreeAndBelowTheEphemeralRange(t *testing.T) {
	ps, err := Ports(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		if p < low || p >= high || seen[p] {
			t.Fatalf("ports %v: %d repeated or outside %d..%d", ps, p, low, high-1)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		defer l.Close()
		if Free(p) {
			t.Fatalf("port %d is bound, Free says free", p)
		}
	}
}
