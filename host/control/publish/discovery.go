package publish

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/kvevent"
)

// Dynamo's KV router (ai-dynamo 1.6.1) takes KV events only from
// publishers its discovery plane lists: an EventChannel record (where the
// publisher sends, here NATS under the endpoint's subject prefix) and an
// EventSource record (which worker and dp_rank the publisher speaks for),
// both keyed by publisher_id. Messages from an unlisted publisher_id are
// dropped, however well-formed. Dynamo's own KvEventPublisher writes these
// records; kvpilot writes the same for its publisher. Shapes and key
// layout were read from Dynamo's file discovery backend
// (--discovery-backend file, DYN_FILE_KV) while a KvEventPublisher ran; a
// real KvRouter then routed on kvpilot's events. Only the file backend is
// written here: etcd and Kubernetes discovery need a client of their own.

// DynamoSource names the worker a publisher speaks for.
type DynamoSource struct {
	Namespace, Component, Endpoint string
	PublisherID                    uint64
	WorkerID                       uint64
	DPRank                         uint32
}

type dynamoEndpoint struct {
	Namespace string `json:"namespace"`
	Component string `json:"component"`
	Name      string `json:"name"`
}

type dynamoScope struct {
	Kind     string         `json:"kind"`
	Endpoint dynamoEndpoint `json:"endpoint"`
}

// key is the record's name: namespace/<ns>/component/<c>/endpoint/<e>/
// topic/kv-events/<publisher_id in hex>, percent-encoded as one file name
// (Dynamo escapes every byte but ASCII letters and digits).
func (s DynamoSource) key() string {
	raw := "namespace/" + s.Namespace + "/component/" + s.Component + "/endpoint/" + s.Endpoint +
		"/topic/" + kvevent.Topic + "/" + strconv.FormatUint(s.PublisherID, 16)
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func (s DynamoSource) records() (channel, source []byte, err error) {
	ep := dynamoEndpoint{Namespace: s.Namespace, Component: s.Component, Name: s.Endpoint}
	scope := dynamoScope{Kind: "endpoint", Endpoint: ep}
	channel, err = json.Marshal(map[string]any{
		"type": "EventChannel", "scope": scope, "topic": kvevent.Topic, "instance_id": s.PublisherID,
		"transport": map[string]any{"kind": "Nats", "config": map[string]string{
			"subject_prefix": "namespace." + s.Namespace + ".component." + s.Component + ".endpoint." + s.Endpoint}},
	})
	if err != nil {
		return nil, nil, err
	}
	source, err = json.Marshal(map[string]any{
		"type": "EventSource", "scope": scope, "topic": kvevent.Topic, "publisher_id": s.PublisherID,
		"metadata": map[string]any{
			"kv_state_endpoint": ep,
			"worker":            map[string]uint64{"worker_id": s.WorkerID, "dp_rank": uint64(s.DPRank)},
			"publisher_id":      s.PublisherID,
		},
	})
	return channel, source, err
}

// OtherSources lists the publisher ids of the event sources in the store
// rooted at dir that speak for s's worker and dp_rank, s's own excepted.
// ai-dynamo 1.6.1's router took neither publisher's events when a worker
// had two (observed with a real KvRouter), so a second source is worth a
// loud warning: a Dynamo publisher of the engine's own, or a stale entry a
// killed host left behind. Unreadable entries are skipped.
func OtherSources(dir string, s DynamoSource) []uint64 {
	ents, err := os.ReadDir(filepath.Join(dir, "v1", "event_sources"))
	if err != nil {
		return nil
	}
	var out []uint64
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, "v1", "event_sources", e.Name()))
		if err != nil {
			continue
		}
		var rec struct {
			Scope       dynamoScope `json:"scope"`
			PublisherID uint64      `json:"publisher_id"`
			Metadata    struct {
				Worker struct {
					WorkerID uint64 `json:"worker_id"`
					DPRank   uint32 `json:"dp_rank"`
				} `json:"worker"`
			} `json:"metadata"`
		}
		if json.Unmarshal(b, &rec) != nil {
			continue
		}
		ep := rec.Scope.Endpoint
		if rec.PublisherID != s.PublisherID && rec.Metadata.Worker.WorkerID == s.WorkerID &&
			rec.Metadata.Worker.DPRank == s.DPRank && ep.Namespace == s.Namespace &&
			ep.Component == s.Component && ep.Name == s.Endpoint {
			out = append(out, rec.PublisherID)
		}
	}
	return out
}

// RegisterFileDiscovery lists s in the Dynamo file discovery store rooted
// at dir (Dynamo's DYN_FILE_KV). Each record is written whole (a temporary
// file, then a rename): Dynamo watches the directory and would read a
// half-written file as garbage. The returned function removes both
// records; call it when the publisher stops.
func RegisterFileDiscovery(dir string, s DynamoSource) (func() error, error) {
	channel, source, err := s.records()
	if err != nil {
		return nil, fmt.Errorf("dynamo discovery records: %w", err)
	}
	key := s.key()
	var written []string
	for _, r := range []struct {
		bucket string
		data   []byte
	}{{"event_channels", channel}, {"event_sources", source}} {
		path := filepath.Join(dir, "v1", r.bucket, key)
		if err := writeWhole(dir, path, r.data); err != nil {
			for _, p := range written {
				os.Remove(p)
			}
			return nil, fmt.Errorf("dynamo file discovery %s: %w", dir, err)
		}
		written = append(written, path)
	}
	return func() error {
		var errs []error
		for _, p := range written {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}, nil
}

// writeWhole writes path through a temporary file in the store's root,
// outside the buckets Dynamo watches.
func writeWhole(root, path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(root, ".kvpilot-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
