// Package promtext reads the samples of a Prometheus text exposition (a
// /metrics page), for benchmarks that count what a server counted.
package promtext

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Sample is one line of an exposition: the metric's name, its labels as
// written between the braces, and its value.
type Sample struct {
	Name, Labels string
	Value        float64
}

// Label is the value of label name in s ("" when absent).
func (s Sample) Label(name string) string {
	for _, kv := range strings.Split(s.Labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.TrimSpace(k) == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// Read returns every sample of r (comments and malformed lines skipped).
func Read(r io.Reader) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		var s Sample
		rest := line
		if name, after, ok := strings.Cut(line, "{"); ok {
			labels, tail, ok := strings.Cut(after, "}")
			if !ok {
				continue
			}
			s.Name, s.Labels, rest = name, labels, tail
		} else {
			s.Name, rest, _ = strings.Cut(line, " ")
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		s.Value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// Get reads url's exposition.
func Get(ctx context.Context, url string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics %s: status %d", url, resp.StatusCode)
	}
	return Read(resp.Body)
}
