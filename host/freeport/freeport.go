// Package freeport picks loopback TCP ports for servers that tests and
// the demo start as processes of their own, often more than once on the
// same port (a restart). A port the kernel hands out for "127.0.0.1:0"
// lies in its ephemeral range, which outgoing connections draw from too:
// between the check and the server's bind, or across a restart, another
// process's connection can take it (CI saw "address already in use").
// These ports come from below that range, where only a listener that
// names its port can land.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

// The range ports are drawn from: below Linux's default ephemeral range
// (32768-60999).
const (
	low  = 20000
	high = 32768
)

// Ports returns n distinct loopback ports that were free when checked.
func Ports(n int) ([]int, error) {
	seen := make(map[int]bool, n)
	out := make([]int, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000*n {
			return nil, fmt.Errorf("freeport: no %d free ports in %d..%d", n, low, high-1)
		}
		p := low + rand.IntN(high-low)
		if seen[p] {
			continue
		}
		seen[p] = true
		if Free(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Addr returns "127.0.0.1:PORT" for one free port.
func Addr() (string, error) {
	ps, err := Ports(1)
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(ps[0]), nil
}

// Free reports whether a listener can bind the loopback port p now.
func Free(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
