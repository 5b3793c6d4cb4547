package daemon

import (
	"encoding/json"
	"errors"
	"net/http"
	"sort"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// handler serves /metrics (Prometheus text) and /healthz (JSON: 200 when
// no check fails, with status "waiting" while one waits (no engine has
// registered yet); 503 naming the failing ones otherwise).
func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", d.healthz)
	return mux
}

// waiting is what a check returns for a part that is not failing but not
// ready yet: the engine before it first registers. /healthz names it and
// reports status "waiting" (200: the host itself is alive and serving, so a
// liveness probe must not restart it while the engine starts), where a
// failing check makes it "unhealthy" (503).
type waiting string

func (w waiting) Error() string { return string(w) }

type health struct {
	Status   string            `json:"status"`
	WorkerID uint64            `json:"worker_id"`
	Checks   map[string]string `json:"checks"`
}

func (d *Daemon) healthz(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	names := make([]string, 0, len(d.checks))
	for n := range d.checks {
		names = append(names, n)
	}
	checks := make(map[string]func() error, len(d.checks))
	for n, c := range d.checks {
		checks[n] = c
	}
	d.mu.Unlock()
	sort.Strings(names)

	h := health{Status: "ok", WorkerID: d.cfg.WorkerID, Checks: map[string]string{}}
	var wait waiting
	for _, n := range names {
		err := checks[n]()
		switch {
		case errors.As(err, &wait):
			if h.Status == "ok" {
				h.Status = "waiting"
			}
			h.Checks[n] = err.Error()
			continue
		case err != nil:
			h.Status = "unhealthy"
			h.Checks[n] = err.Error()
			continue
		}
		h.Checks[n] = "ok"
	}
	w.Header().Set("Content-Type", "application/json")
	if h.Status == "unhealthy" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(h)
}
