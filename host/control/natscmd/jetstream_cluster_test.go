package natscmd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/natsembed/natscluster"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
)

// On a three-node cluster with the command stream at three replicas, a
// rolling restart of every node loses no acknowledged command and applies
// none twice: a publisher keeps sending pins (retrying, under the same
// Nats-Msg-Id, any publish the cluster did not acknowledge) while each
// node in turn is stopped and started again.
func TestJetStreamCommandsSurviveARollingRestart(t *testing.T) {
	cl, ctx := natscluster.ForTest(t, 3)

	h := newHost(t)
	var err error
	if h.nats, err = natsembed.Start(natsembed.Options{URL: cl.URL(), StartTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	h.cmds, err = New(Config{Conn: h.nats.Conn(), Ingress: ingressOf(t, h.ex, nil, 0), WorkerID: 3, WorkerSubject: "kv-control-3",
		BroadcastSubject: "kv-control-broadcast", JetStream: true, StreamReplicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmds.Start(ctx); err != nil {
		t.Fatal(err)
	}
	seq := h.commit([]uint32{1, 2, 3, 4})[0]

	pub, err := nats.Connect(cl.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	js, err := jetstream.New(pub)
	if err != nil {
		t.Fatal(err)
	}
	restarted := make(chan error, 1)
	go func() {
		for i := range cl.Nodes {
			if err := cl.Restart(ctx, i); err != nil {
				restarted <- fmt.Errorf("node %d: %w", i, err)
				return
			}
		}
		restarted <- nil
	}()

	const commands = 60
	retries := 0
	for i := range commands {
		m := nats.NewMsg("kv-control-3")
		m.Data = []byte(`{"type":"Cache","block_hashes":[` + itoa(seq) + `],"pin":true}`)
		m.Header.Set(controlclient.HeaderMsgID, fmt.Sprintf("cmd-%d", i))
		for {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.PublishMsg(pctx, m)
			pcancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("command %d never acknowledged: %v", i, err)
			}
			retries++
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	// A delivery lost in a node's restart comes again after the
	// consumer's ack wait.
	deadline := time.Now().Add(ackWait + 30*time.Second)
	for h.pins(seq) < commands && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a command applied twice would show by now
	if got := h.pins(seq); got != commands {
		t.Fatalf("pin count %d after %d acknowledged commands (%d publishes retried)", got, commands, retries)
	}
	t.Logf("%d commands across a rolling restart, %d publishes retried", commands, retries)
}
