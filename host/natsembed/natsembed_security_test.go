package natsembed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// pki is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, written as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvpilot test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, []byte) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der, kd
	}
	sc, sk := leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	cc, ck := leaf(3, "kvpilot-host", x509.ExtKeyUsageClientAuth)
	return pki{
		ca:         write("ca.pem", "CERTIFICATE", caDER),
		serverCert: write("server.pem", "CERTIFICATE", sc), serverKey: write("server-key.pem", "EC PRIVATE KEY", sk),
		clientCert: write("client.pem", "CERTIFICATE", cc), clientKey: write("client-key.pem", "EC PRIVATE KEY", ck),
	}
}

// runServer starts a separate nats-server in this process with o.
func runServer(t *testing.T, o *server.Options) *server.Server {
	t.Helper()
	o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func seedFile(t *testing.T, dir, name string, kp nkeys.KeyPair) string {
	t.Helper()
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// roundTrip proves the connection works: a message published comes back.
func roundTrip(t *testing.T, n *NATS) {
	t.Helper()
	sub, err := n.Conn().SubscribeSync("kv-control-broadcast")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Conn().Publish("kv-control-broadcast", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("no round trip over the secured connection: %v", err)
	}
}

// A cluster that requires an nkey user and mutual TLS: the host connects
// with nats.nkey_seed_file and the TLS files, and each missing or wrong
// piece fails at start with an error that says what was refused.
func TestNKeyAndMutualTLSRequired(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: p.serverCert, KeyFile: p.serverKey, CaFile: p.ca, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	s := runServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}, TLSConfig: tc, TLS: true, TLSVerify: true, TLSTimeout: 5})
	url := s.ClientURL()
	good := Options{URL: url, NKeySeedFile: seedFile(t, dir, "user.nk", user), TLSCAFile: p.ca, TLSCertFile: p.clientCert, TLSKeyFile: p.clientKey, StartTimeout: 5 * time.Second}
	n, err := Start(good)
	if err != nil {
		t.Fatalf("secured connect: %v", err)
	}
	roundTrip(t, n)
	n.Close()

	stranger, _ := nkeys.CreateUser()
	otherDir := t.TempDir()
	other := newPKI(t, otherDir) // a CA the server does not trust
	for name, tc := range map[string]struct {
		mod  func(o *Options)
		want string
	}{
		"unknown nkey":        {func(o *Options) { o.NKeySeedFile = seedFile(t, dir, "stranger.nk", stranger) }, "authorization"},
		"no nkey":             {func(o *Options) { o.NKeySeedFile = "" }, "authorization"},
		"no client cert":      {func(o *Options) { o.TLSCertFile, o.TLSKeyFile = "", "" }, ""},
		"untrusted client":    {func(o *Options) { o.TLSCertFile, o.TLSKeyFile = other.clientCert, other.clientKey }, ""},
		"server not trusted":  {func(o *Options) { o.TLSCAFile = other.ca }, "certificate"},
		"plaintext to TLS":    {func(o *Options) { o.TLSCAFile, o.TLSCertFile, o.TLSKeyFile = "", "", "" }, ""},
		"seed file not a key": {func(o *Options) { o.NKeySeedFile = p.ca }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			o := good
			tc.mod(&o)
			n, err := Start(o)
			if err == nil {
				n.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), url) && !strings.Contains(err.Error(), "seed") && !strings.Contains(err.Error(), "nkey") {
				t.Errorf("error names neither the cluster nor the key file: %v", err)
			}
			if tc.want != "" && !strings.Contains(strings.ToLower(err.Error()), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			t.Logf("%s: %v", name, err)
		})
	}
}

// A cluster in operator mode (decentralized JWT auth): the host connects
// with nats.creds_file; a user of an account the operator never signed is
// refused.
func TestCredsFileRequired(t *testing.T) {
	dir := t.TempDir()
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	opClaims, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		t.Fatal(err)
	}
	creds := func(name string, signer nkeys.KeyPair) (string, string) {
		acct, _ := nkeys.CreateAccount()
		acctPub, _ := acct.PublicKey()
		acctJWT, err := jwt.NewAccountClaims(acctPub).Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := nkeys.CreateUser()
		uPub, _ := u.PublicKey()
		uJWT, err := jwt.NewUserClaims(uPub).Encode(acct)
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := u.Seed()
		b, err := jwt.FormatUserConfig(uJWT, seed)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p, acctJWT
	}
	goodCreds, acctJWT := creds("good.creds", op)
	rogue, _ := nkeys.CreateOperator()
	badCreds, _ := creds("rogue.creds", rogue)
	resolver := &server.MemAccResolver{}
	ac, err := jwt.DecodeAccountClaims(acctJWT)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolver.Store(ac.Subject, acctJWT); err != nil {
		t.Fatal(err)
	}
	s := runServer(t, &server.Options{TrustedOperators: []*jwt.OperatorClaims{opClaims}, AccountResolver: resolver})
	n, err := Start(Options{URL: s.ClientURL(), CredsFile: goodCreds, StartTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("connect with creds: %v", err)
	}
	roundTrip(t, n)
	n.Close()
	for name, o := range map[string]Options{
		"rogue account": {URL: s.ClientURL(), CredsFile: badCreds, StartTimeout: 3 * time.Second},
		"no creds":      {URL: s.ClientURL(), StartTimeout: 3 * time.Second},
	} {
		n, err := Start(o)
		if err == nil {
			n.Close()
			t.Fatalf("%s: connected", name)
		}
		if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Errorf("%s: error does not say authorization was refused: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}
