package ttl

import (
	"errors"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"30s", 30 * time.Second}, {"5m", 5 * time.Minute}, {"1h", time.Hour}, {"1h30m", 90 * time.Minute},
		{"45", 45 * time.Second}, {" 300 ", 300 * time.Second}, {"1.5", 1500 * time.Millisecond},
		{"0", 0}, {"0s", 0}, {"250ms", 250 * time.Millisecond},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{"", "abc", "-5", "-1s", "5x", "1e400", "NaN", "99999999999", "100000h", "1..2", "+-3"} {
		if d, err := Parse(in); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, %v; want ErrInvalid", in, d, err)
		}
	}
}

func TestPolicy(t *testing.T) {
	p := Policy{Default: 300 * time.Second, Min: 10 * time.Second, Max: time.Hour}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[time.Duration]time.Duration{
		0: 300 * time.Second, time.Second: 10 * time.Second, 2 * time.Hour: time.Hour, time.Minute: time.Minute,
	} {
		if got := p.Resolve(in); got != want {
			t.Errorf("Resolve(%v) = %v, want %v", in, got, want)
		}
	}
	if err := (Policy{Default: time.Hour, Min: time.Second, Max: time.Minute}).Validate(); err == nil {
		t.Error("default above max accepted")
	}
	if err := DefaultPolicy.Validate(); err != nil {
		t.Error(err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"30s", "5m", "1h", "45", "-1", "1e9", "", "0.000000001", "9223372036s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error does not wrap ErrInvalid: %v", s, err)
			}
			return
		}
		if d < 0 || d > Max {
			t.Fatalf("Parse(%q) = %v outside [0, %v]", s, d, Max)
		}
		if r := DefaultPolicy.Resolve(d); r < DefaultPolicy.Min || r > DefaultPolicy.Max {
			t.Fatalf("Resolve(%v) = %v outside clamps", d, r)
		}
	})
}
