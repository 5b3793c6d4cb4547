package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestBurstThenRefill(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	l := New(10, 3, c.now)
	for i := 0; i < 3; i++ {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("burst token %d refused", i)
		}
	}
	ok, retry := l.Allow("a")
	if ok || retry <= 0 || retry > 100*time.Millisecond {
		t.Fatalf("past burst: ok=%v retry=%v", ok, retry)
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another source was limited by a's traffic")
	}
	c.t = c.t.Add(100 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("no refill after 100ms at 10/s")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("refilled more than one token")
	}
}

func TestDisabledAndNil(t *testing.T) {
	var nilL *Limiter
	if ok, _ := nilL.Allow("x"); !ok {
		t.Fatal("nil limiter must allow")
	}
	l := New(0, 1, nil)
	for i := 0; i < 100; i++ {
		if ok, _ := l.Allow("x"); !ok {
			t.Fatal("rate 0 must disable limiting")
		}
	}
}

func TestIdleSourcesForgotten(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := New(100, 10, c.now)
	for i := 0; i < 1000; i++ {
		l.Allow(fmt.Sprint(i))
	}
	c.t = c.t.Add(time.Second)
	l.Allow("new")
	if n := l.Sources(); n != 1 {
		t.Fatalf("%d sources tracked after all went idle, want 1", n)
	}
}
