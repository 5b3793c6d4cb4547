package engine_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kvpilot/kvpilot/host/engine/enginetest"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
	"google.golang.org/grpc/status"
)

// FuzzEngineCalls hands the Engine service whatever proto bytes an engine
// on the socket can send, as one of its unary calls, against a real host
// (index, memfd pools, mover) with a live registration and cached pages.
// Requests naming registration "REG" (or none) get the live one, so
// mutations reach past the registration check; state carries over between
// inputs, as it does between an engine's calls. For any input: no panic,
// every refusal is a gRPC status carrying a registered code, and the index
// keeps its invariants.
func FuzzEngineCalls(f *testing.F) {
	h, err := enginetest.Start(enginetest.Options{Dir: f.TempDir(), DevicePages: 32, HostPages: 64, LoadBackDeadline: 50 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	c, err := dialCtx(ctx, h.Socket)
	cancel()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = c.Close() })
	// One cached session, so Match finds pages and a different layout is
	// refused rather than reopening the pools.
	runTurnF(f, c, seq(0, 48))

	toks := seq(0, 48)
	seeds := []struct {
		kind byte
		m    proto.Message
	}{
		{0, &pb.MatchRequest{RegistrationId: "REG", RequestId: "r1", Session: "s", Tenant: "acme", Tokens: toks,
			Messages: []*pb.ChatMessage{{Role: "user"}}}},
		{0, &pb.MatchRequest{RegistrationId: "REG", RequestId: "r2", Session: "s", Tokens: toks, LoadBackDeadlineMs: 5}},
		{1, &pb.AllocateRequest{RegistrationId: "REG", RequestId: "r1", Pages: 3}},
		{2, &pb.CommitRequest{RegistrationId: "REG", RequestId: "r1", Tokens: toks, PageSlots: []uint32{0, 1, 2}}},
		{2, &pb.CommitRequest{RegistrationId: "REG", RequestId: "r1", Tokens: toks, PageSlots: []uint32{2}, FirstPage: 2}},
		// A tensor-parallel rank's calls (parts.go): refused on this
		// one-part registration, accepted on a connector one of two parts.
		{1, &pb.AllocateRequest{RegistrationId: "REG", RequestId: "r1", Pages: 2, Part: 1, FirstPage: 1}},
		{2, &pb.CommitRequest{RegistrationId: "REG", RequestId: "r1", Tokens: toks, PageSlots: []uint32{3, 4}, FirstPage: 1, Part: 2}},
		{3, &pb.ReleaseRequest{RegistrationId: "REG", RequestId: "r2"}},
		{4, &pb.FinishRequest{RegistrationId: "REG", RequestId: "r1", Usage: &pb.Usage{InputTokens: 48},
			CacheControl: &pb.CacheControl{Type: "ephemeral", Ttl: "5m"}}},
		{4, &pb.FinishRequest{RegistrationId: "REG", RequestId: "r1", CacheControlJson: `{"nvext":{"cache_control":{"type":"ephemeral","ttl":"1h"}}}`}},
		{5, &pb.RegisterRequest{ApiVersion: 1, EngineId: "fuzz", Model: "tiny-gqa", PageSize: 16, Dtype: "fp32", Layers: 2,
			Buffers:   []*pb.KVBuffer{{Name: "k", Heads: 2, HeadDim: 8}, {Name: "v", Heads: 2, HeadDim: 8}},
			RopeSlice: &pb.RopeSlice{Buffer: 0, Offset: 0, Dim: 8, Style: "half_split"}, Rope: &pb.RopeConfig{Base: 10000}}},
		{5, &pb.RegisterRequest{ApiVersion: 1, EngineId: "fuzz-tp", Model: "tiny-gqa", PageSize: 16, Dtype: "fp32", Layers: 2,
			Buffers:   []*pb.KVBuffer{{Name: "k", Heads: 2, HeadDim: 8}, {Name: "v", Heads: 2, HeadDim: 8}},
			RopeSlice: &pb.RopeSlice{Buffer: 0, Offset: 0, Dim: 8, Style: "half_split"}, Rope: &pb.RopeConfig{Base: 10000},
			Mode: pb.EngineMode_ENGINE_MODE_CONNECTOR, Parts: 2}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s.kind, b)
	}
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		reg, _ := h.Service.Registration()
		live := func(id *string) {
			if *id == "" || *id == "REG" {
				*id = reg.ID
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var callErr error
		switch kind % 6 {
		case 0:
			var m pb.MatchRequest
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			live(&m.RegistrationId)
			_, callErr = h.Server.Match(ctx, &m)
		case 1:
			var m pb.AllocateRequest
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			live(&m.RegistrationId)
			_, callErr = h.Server.Allocate(ctx, &m)
		case 2:
			var m pb.CommitRequest
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			live(&m.RegistrationId)
			_, callErr = h.Server.Commit(ctx, &m)
		case 3:
			var m pb.ReleaseRequest
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			live(&m.RegistrationId)
			_, callErr = h.Server.Release(ctx, &m)
		case 4:
			var m pb.FinishRequest
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			live(&m.RegistrationId)
			_, callErr = h.Server.Finish(ctx, &m)
		case 5:
			var m pb.RegisterRequest
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			// Resetting the cache reopens pools sized by the fuzzed layout:
			// that is the engine's right, and not what this target probes.
			m.ResetCache = false
			_, callErr = h.Server.Register(ctx, &m)
		}
		if callErr != nil {
			if _, ok := status.FromError(callErr); !ok {
				t.Fatalf("call kind %d: %v is not a gRPC status", kind%6, callErr)
			}
			e := convert.FromGRPCStatus(callErr)
			if e == nil {
				t.Fatalf("call kind %d: %v carries no registry code", kind%6, callErr)
			}
			if _, ok := errcode.Lookup(e.Code); !ok {
				t.Fatalf("call kind %d: code %q is not registered (%v)", kind%6, e.Code, callErr)
			}
		}
		if err := h.Check(); err != nil {
			t.Fatalf("index invariants after call kind %d: %v", kind%6, err)
		}
	})
}

func dialCtx(ctx context.Context, socket string) (*engineclient.Client, error) {
	return engineclient.Dial(ctx, engineclient.Options{Socket: socket, EngineID: "fuzz", Layout: gqa(16), Rope: engineclient.RopeConfig{Base: 10000}})
}

// runTurnF caches toks' full pages under session "s" (page bytes are left
// as allocated: the fuzz target probes the calls, not the contents).
func runTurnF(tb testing.TB, c *engineclient.Client, toks []uint32) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.Match(ctx, engineclient.MatchRequest{Session: "s", Tenant: "acme", Tokens: toks})
	if err != nil {
		tb.Fatal(err)
	}
	slots, err := c.Allocate(ctx, m.RequestID, len(toks)/16)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := c.Commit(ctx, m.RequestID, toks, slots); err != nil {
		tb.Fatal(err)
	}
	if _, err := c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID}); err != nil {
		tb.Fatal(err)
	}
}
