package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/kvpilot/kvpilot/host/bench/controlhost"
	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

type latencyArm struct {
	name    string
	call    func(ctx context.Context, i int) error
	samples []time.Duration
}

// controlFlags defines the flags of `kvpilot bench control` (its row in
// scenarios.go) and returns what runs it.
func controlFlags(fs *flag.FlagSet) runFunc {
	iters := fs.Int("iters", 20000, "timed round trips per arm")
	warmup := fs.Int("warmup", 2000, "untimed round trips per arm first")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed round trips (client and host: one process) to this file")
	return func(ctx context.Context, _ scenario.Progress) (scenario.Report, error) {
		if *iters < 100 {
			return nil, fmt.Errorf("--iters %d: want at least 100", *iters)
		}
		arms, err := measureControl(ctx, *iters, *warmup, *cpuProfile)
		if err != nil {
			return nil, err
		}
		return controlReport(arms, *iters, *warmup), nil
	}
}

// measureControl times iters round trips of each arm against a real
// in-process host, after warmup untimed ones.
func measureControl(ctx context.Context, iters, warmup int, cpuProfile string) ([]*latencyArm, error) {
	dir, err := os.MkdirTemp("", "kvpilot-bench-control")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	h, err := controlhost.Start(filepath.Join(dir, "d"))
	if err != nil {
		return nil, fmt.Errorf("start host: %w", err)
	}
	defer h.Stop()
	seqs, err := h.Commit("", make([]uint32, 64))
	if err != nil {
		return nil, err
	}
	turns := [2]directive.Turn{
		{Directives: []directive.Directive{directive.Cache{BlockHashes: []directive.Hash{directive.Hash(seqs[0])}, Pin: true}}},
		{Directives: []directive.Directive{directive.Cache{BlockHashes: []directive.Hash{directive.Hash(seqs[0])}, Pin: false}}},
	}
	applied := func(r directive.TurnReply, err error) error {
		if err != nil {
			return err
		}
		if !r.OK() {
			return fmt.Errorf("turn refused: %v", r.Error)
		}
		return nil
	}

	uc, err := controlclient.DialUnix(h.Socket, controlclient.UnixOptions{Source: "bench"})
	if err != nil {
		return nil, err
	}
	defer uc.Close()
	raw, err := grpc.NewClient("unix:"+h.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	ping := pb.NewControlClient(raw)
	nc, err := controlclient.ConnectNATS(h.NATSURL, controlclient.NATSOptions{Subject: h.Subject, Source: "bench"})
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	echo, err := h.Daemon.NATS().Conn().Subscribe("kvpilot.bench.echo", func(m *nats.Msg) { m.Respond(m.Data) })
	if err != nil {
		return nil, err
	}
	defer echo.Unsubscribe()
	h.Daemon.NATS().Conn().Flush()
	payload, _ := json.Marshal(turns[0])

	arms := []*latencyArm{
		{name: "uds_baseline", call: func(ctx context.Context, _ int) error {
			// The empty call: Ping runs a handler that does nothing.
			_, err := ping.Ping(ctx, &pb.PingRequest{})
			return err
		}},
		{name: "uds_unimplemented", call: func(ctx context.Context, _ int) error {
			// The floor under any call, reported but not a baseline: the
			// server answers a method it does not have with a status alone,
			// running no handler and sending no message.
			err := raw.Invoke(ctx, "/kvpilot.v1.Control/NoSuchMethod", &emptypb.Empty{}, &emptypb.Empty{})
			if status.Code(err) == codes.Unimplemented {
				return nil
			}
			return err
		}},
		{name: "uds", call: func(ctx context.Context, i int) error { return applied(uc.Apply(ctx, turns[i&1])) }},
		{name: "nats_baseline", call: func(ctx context.Context, _ int) error {
			_, err := nc.Conn().RequestWithContext(ctx, "kvpilot.bench.echo", payload)
			return err
		}},
		{name: "nats", call: func(ctx context.Context, i int) error { return applied(nc.Apply(ctx, turns[i&1])) }},
	}
	// Arms take turns in rounds, so that noise from other work on the
	// machine falls on all of them alike.
	const round = 500
	for _, a := range arms {
		for i := 0; i < warmup; i++ {
			if err := a.call(ctx, i); err != nil {
				return nil, fmt.Errorf("%s warm-up: %w", a.name, err)
			}
		}
		a.samples = make([]time.Duration, 0, iters)
	}
	stopProfile, err := startCPUProfile(cpuProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	for done := 0; done < iters; done += round {
		n := min(round, iters-done)
		for _, a := range arms {
			for i := 0; i < n; i++ {
				start := time.Now()
				if err := a.call(ctx, done+i); err != nil {
					return nil, fmt.Errorf("%s: %w", a.name, err)
				}
				a.samples = append(a.samples, time.Since(start))
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return arms, nil
}

// controlReport summarizes the arms against the targets.
func controlReport(arms []*latencyArm, iters, warmup int) scenario.Report {
	results := map[string]map[string]float64{}
	for _, a := range arms {
		results[a.name] = summarize(a.samples)
	}
	ratios := controlRatios(results)
	absMet := results["uds"]["p50_us"] <= 50 && results["uds"]["p99_us"] <= 250 && results["nats"]["p50_us"] <= 150
	ratioMet := ratios["uds_p50"] <= udsP50RatioMax && ratios["uds_p99"] <= udsP99RatioMax && ratios["nats_p50"] <= natsP50RatioMax
	met := absMet && ratioMet
	js := map[string]any{
		"scenario": "control",
		"params": map[string]any{
			"iters": iters, "warmup": warmup, "gomaxprocs": runtime.GOMAXPROCS(0),
			"directive": "one-directive turn: Cache pin / unpin of one cached block, audited",
			"nats":      "client over TCP loopback to the embedded server; host in-process",
		},
		"arms":   results,
		"ratios": ratios,
		"targets": map[string]any{
			"uds_p50_us_max": 50, "uds_p99_us_max": 250, "nats_p50_us_max": 150,
			"uds_p50_ratio_max": udsP50RatioMax, "uds_p99_ratio_max": udsP99RatioMax, "nats_p50_ratio_max": natsP50RatioMax,
			"met": met,
		},
	}
	return tableReport{js, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "control bench: %d round trips per arm (GOMAXPROCS %d)\n\n", iters, runtime.GOMAXPROCS(0))
		fmt.Fprintf(tw, "arm\tp50 (us)\tp99 (us)\tmean (us)\ttarget\n")
		target := map[string]string{"uds": "p50 <= 50, p99 <= 250", "nats": "p50 <= 150"}
		for _, a := range arms {
			r := results[a.name]
			t := target[a.name]
			if t == "" {
				t = "-"
			}
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%s\n", a.name, r["p50_us"], r["p99_us"], r["mean_us"], t)
		}
		fmt.Fprintf(tw, "\nratios to the same run's baselines: uds p50 %.2f (<= %.1f), uds p99 %.2f (<= %.1f), nats p50 %.2f (<= %.1f)\n",
			ratios["uds_p50"], udsP50RatioMax, ratios["uds_p99"], udsP99RatioMax, ratios["nats_p50"], natsP50RatioMax)
		fmt.Fprintf(tw, "targets met: %v\n", met)
		return tw.Flush()
	}}
}

// The overhead a directive may add to its transport: its round trip over
// the round trip of an empty call on the same socket (uds_baseline) or of
// a raw NATS echo (nats_baseline), measured in the same run.
const (
	udsP50RatioMax  = 1.3
	udsP99RatioMax  = 2.0
	natsP50RatioMax = 1.6
)

// controlRatios divides each directive arm's percentiles by its
// baseline's.
func controlRatios(r map[string]map[string]float64) map[string]float64 {
	div := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	return map[string]float64{
		"uds_p50":  div(r["uds"]["p50_us"], r["uds_baseline"]["p50_us"]),
		"uds_p99":  div(r["uds"]["p99_us"], r["uds_baseline"]["p99_us"]),
		"nats_p50": div(r["nats"]["p50_us"], r["nats_baseline"]["p50_us"]),
	}
}

func summarize(s []time.Duration) map[string]float64 {
	if len(s) == 0 {
		return nil
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	pct := func(p float64) time.Duration { return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))] }
	return map[string]float64{
		"p50_us": us(pct(0.50)), "p99_us": us(pct(0.99)), "mean_us": us(sum / time.Duration(len(sorted))),
		"samples": float64(len(sorted)),
	}
}
