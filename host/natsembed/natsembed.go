// Package natsembed gives the host its NATS connection: by default an
// in-process nats-server with JetStream on, storing under the data dir;
// or, when a URL is configured, a client of an existing
// cluster with creds, nkey or TLS options.
//
// Both the remote KV tier (a JetStream object store) and the control plane
// (command subjects, KV events) use the connection Start returns. The
// embedded server listens on 127.0.0.1:4222 by default so a Dynamo router,
// `nats sub` or another tool on the machine can reach it; an empty Listen
// keeps it in-process only.
//
//	n, err := natsembed.Start(natsembed.Options{DataDir: dir, Listen: natsembed.DefaultListen})
//	if err != nil { ... }
//	defer n.Close()
//	js, err := n.JetStream()
package natsembed

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// DefaultListen is the address the embedded server listens on unless
// configured otherwise.
const DefaultListen = "127.0.0.1:4222"

// ErrConfig is wrapped by errors about contradictory or missing options.
var ErrConfig = errors.New("nats options")

// Options choose between the embedded server and an existing cluster.
// Setting URL selects the cluster; otherwise DataDir is required.
type Options struct {
	// URL of an existing NATS cluster (comma-separated for several
	// servers). Empty: start the embedded server.
	URL string
	// CredsFile is a NATS credentials file (JWT and seed) for URL.
	CredsFile string
	// NKeySeedFile is an nkey seed file for URL.
	NKeySeedFile string
	// TLSCAFile verifies the cluster's certificates; TLSCertFile and
	// TLSKeyFile authenticate this client. Any of them turns TLS on.
	TLSCAFile, TLSCertFile, TLSKeyFile string

	// DataDir is where the embedded server keeps JetStream data
	// (<DataDir>/jetstream). Created 0700 if missing.
	DataDir string
	// Listen is host:port for the embedded server's client port; port 0
	// picks a free one; the empty string means no listener at all (the
	// host connects in-process). Use DefaultListen for the default.
	Listen string
	// ServerName names the embedded server (default "kvpilot").
	ServerName string
	// JetStreamMaxMemory and JetStreamMaxStore cap JetStream's memory and
	// file storage in bytes; 0 leaves the server's defaults.
	JetStreamMaxMemory, JetStreamMaxStore int64
	// Users, when set, make the embedded server require an nkey of every
	// client and confine each to its subjects (see User).
	Users []User

	// Name is the client connection name seen by the server (default "kvpilot").
	Name string
	// StartTimeout bounds server start-up and the first connect (default 10s).
	StartTimeout time.Duration
	// Logger receives the embedded server's log and connection events; nil discards.
	Logger hclog.Logger
}

// NATS is a started connection, with the embedded server when there is one.
type NATS struct {
	conn *nats.Conn
	srv  *server.Server
	opts Options
	log  hclog.Logger
	// hostKey signs the host's connections to an embedded server with
	// users; nil without users.
	hostKey nkeys.KeyPair
}

// Start starts the embedded server (unless o.URL is set) and connects.
func Start(o Options) (*NATS, error) {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.Name == "" {
		o.Name = "kvpilot"
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("nats")
	n := &NATS{opts: o, log: log}
	if o.URL != "" {
		if o.DataDir != "" || o.Listen != "" {
			log.Debug("url set: data dir and listen address of the embedded server are unused", "url", o.URL)
		}
		conn, err := n.connect(o.Name)
		if err != nil {
			return nil, err
		}
		n.conn = conn
		log.Info("connected to NATS cluster", "url", conn.ConnectedUrlRedacted())
		return n, nil
	}
	if o.CredsFile != "" || o.NKeySeedFile != "" || o.TLSCAFile != "" || o.TLSCertFile != "" {
		return nil, fmt.Errorf("%w: creds, nkey and TLS apply to a cluster URL, and no URL is set", ErrConfig)
	}
	srv, hostKey, err := startServer(o, log)
	if err != nil {
		return nil, err
	}
	n.hostKey = hostKey
	n.srv = srv
	conn, err := n.connect(o.Name)
	if err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, err
	}
	n.conn = conn
	return n, nil
}

func startServer(o Options, log hclog.Logger) (*server.Server, nkeys.KeyPair, error) {
	if o.DataDir == "" {
		return nil, nil, fmt.Errorf("%w: the embedded server needs a data dir (or set a cluster URL)", ErrConfig)
	}
	storeDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("nats data dir: %w", err)
	}
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("nats data dir: %w", err)
	}
	name := o.ServerName
	if name == "" {
		name = "kvpilot"
	}
	so := &server.Options{
		ServerName:         name,
		JetStream:          true,
		StoreDir:           storeDir,
		JetStreamMaxMemory: o.JetStreamMaxMemory,
		JetStreamMaxStore:  o.JetStreamMaxStore,
		NoSigs:             true, // the host owns signal handling
		MaxPayload:         8 << 20,
	}
	hostKey, err := authOptions(so, o.Users)
	if err != nil {
		return nil, nil, err
	}
	if o.Listen == "" {
		so.DontListen = true
	} else {
		host, port, err := splitListen(o.Listen)
		if err != nil {
			return nil, nil, err
		}
		so.Host, so.Port = host, port
	}
	srv, err := server.NewServer(so)
	if err != nil {
		return nil, nil, fmt.Errorf("nats server: %w", err)
	}
	srv.SetLoggerV2(serverLogger{log}, log.IsDebug(), log.IsTrace(), false)
	srv.Start()
	if !srv.ReadyForConnections(o.StartTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, nil, fmt.Errorf("nats server (listen %q, store %s) not ready within %v; is the port in use?", o.Listen, storeDir, o.StartTimeout)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, nil, fmt.Errorf("nats server started without JetStream (store %s)", storeDir)
	}
	if so.DontListen {
		log.Info("embedded NATS server started, in-process only", "store", storeDir)
	} else {
		log.Info("embedded NATS server started", "url", srv.ClientURL(), "store", storeDir, "users", len(o.Users))
	}
	return srv, hostKey, nil
}

// splitListen turns host:port into nats-server options; port 0 becomes the
// server's "pick a free port".
func splitListen(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("%w: listen address %q: %v", ErrConfig, s, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%w: listen address %q: port must be 0..65535", ErrConfig, s)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// Connect opens another connection with the same options: in-process to
// the embedded server, or to the cluster URL. The caller closes it.
func (n *NATS) Connect(name string) (*nats.Conn, error) { return n.connect(name) }

func (n *NATS) connect(name string) (*nats.Conn, error) {
	o := n.opts
	log := n.log
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(o.StartTimeout),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "conn", name, "error", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "conn", name, "url", c.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("NATS async error", "conn", name, "error", err)
		}),
	}
	url := o.URL
	if n.srv != nil {
		opts = append(opts, nats.InProcessServer(n.srv))
		opts = append(opts, n.hostAuth()...)
		url = ""
	} else {
		more, err := clusterOptions(o)
		if err != nil {
			return nil, err
		}
		opts = append(opts, more...)
	}
	conn, err := nats.Connect(url, opts...)
	if err != nil {
		if n.srv != nil {
			return nil, fmt.Errorf("connect to the embedded NATS server: %w", err)
		}
		return nil, fmt.Errorf("connect to NATS %s: %w", o.URL, err)
	}
	return conn, nil
}

func clusterOptions(o Options) ([]nats.Option, error) {
	var opts []nats.Option
	if o.CredsFile != "" && o.NKeySeedFile != "" {
		return nil, fmt.Errorf("%w: set creds file or nkey seed file, not both", ErrConfig)
	}
	for _, f := range []struct{ what, path string }{
		{"creds file", o.CredsFile}, {"nkey seed file", o.NKeySeedFile},
		{"TLS CA file", o.TLSCAFile}, {"TLS cert file", o.TLSCertFile}, {"TLS key file", o.TLSKeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("%w: NATS %s: %v", ErrConfig, f.what, err)
		}
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NKeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("%w: NATS nkey seed file %s: %v", ErrConfig, o.NKeySeedFile, err)
		}
		opts = append(opts, opt)
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return nil, fmt.Errorf("%w: TLS cert file and key file go together", ErrConfig)
	}
	if o.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(o.TLSCAFile))
	}
	if o.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(o.TLSCertFile, o.TLSKeyFile))
	}
	return opts, nil
}

// Conn is the host's connection.
func (n *NATS) Conn() *nats.Conn { return n.conn }

// Server is the embedded server, or nil when connected to a cluster.
func (n *NATS) Server() *server.Server { return n.srv }

// Embedded reports whether the server runs in this process.
func (n *NATS) Embedded() bool { return n.srv != nil }

// ClientURL is the address other processes connect to: the embedded
// server's listener, the cluster URL, or "" when in-process only.
func (n *NATS) ClientURL() string {
	if n.srv == nil {
		return n.opts.URL
	}
	if n.srv.Addr() == nil {
		return ""
	}
	return n.srv.ClientURL()
}

// JetStream returns the JetStream API on the host's connection.
func (n *NATS) JetStream() (jetstream.JetStream, error) {
	js, err := jetstream.New(n.conn)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}

// Close flushes and closes the connection, then shuts the embedded server
// down and waits for it (JetStream state is on disk when it returns).
func (n *NATS) Close() error {
	var err error
	if n.conn != nil && !n.conn.IsClosed() {
		if ferr := n.conn.FlushTimeout(2 * time.Second); ferr != nil && !errors.Is(ferr, nats.ErrConnectionClosed) {
			err = fmt.Errorf("nats flush on close: %w", ferr)
		}
		n.conn.Close()
	}
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.log.Info("embedded NATS server stopped")
	}
	return err
}
