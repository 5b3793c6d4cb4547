package daemon

import (
	"encoding/json"
	"net/http"
	"sort"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// handler serves /metrics (Prometheus text) and /healthz (JSON: 200 when
// every check passes, 503 naming the failing ones otherwise).
func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", d.healthz)
	return mux
}

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
	for _, n := range names {
		if err := checks[n](); err != nil {
			h.Status = "unhealthy"
			h.Checks[n] = err.Error()
			continue
		}
		h.Checks[n] = "ok"
	}
	w.Header().Set("Content-Type", "application/json")
	if h.Status != "ok" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(h)
}
