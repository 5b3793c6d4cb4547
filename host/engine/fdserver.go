package engine

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/pool/fdpass"
	"github.com/kvpilot/kvpilot/host/uds"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// offerTTL is how long a registration's descriptor token can be claimed.
const offerTTL = 30 * time.Second

// fdServer is the descriptor side channel (see sdk/enginewire): it hands a
// registration's memfd descriptors, with SCM_RIGHTS, to the process that
// presents the registration's token, once. The listener is a host/uds socket,
// so the same directory mode, socket mode and uid allow-list fence it as the
// engine socket; on top, the claimant's uid must be the registering one.
type fdServer struct {
	s   *Service
	log hclog.Logger

	mu     sync.Mutex
	offers map[string]*fdOffer // by token
	ln     net.Listener
	// closed: close ran, so a serve that starts after it (a host stopped
	// right after it started) returns at once instead of accepting forever.
	closed bool
}

type fdOffer struct {
	reg    string
	uid    int
	fds    []int
	expiry time.Time
}

func newFDServer(s *Service, log hclog.Logger) *fdServer {
	return &fdServer{s: s, log: log, offers: map[string]*fdOffer{}}
}

// offer records the descriptors a registration may claim and returns the
// token. Earlier offers are withdrawn: only the live registration's pools
// may be claimed. The descriptors stay owned by the pools.
func (f *fdServer) offer(reg string, uid int, fds []int) []byte {
	tok := make([]byte, enginewire.FDTokenLen)
	if _, err := rand.Read(tok); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.offers)
	f.offers[string(tok)] = &fdOffer{reg: reg, uid: uid, fds: append([]int(nil), fds...), expiry: time.Now().Add(offerTTL)}
	return tok
}

func (f *fdServer) serve(ln net.Listener) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	f.ln = ln
	f.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("engine descriptor socket: %w", err)
		}
		go f.handle(c)
	}
}

func (f *fdServer) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.ln != nil {
		_ = f.ln.Close()
	}
	clear(f.offers)
}

func (f *fdServer) handle(c net.Conn) {
	defer c.Close()
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return
	}
	_ = uc.SetDeadline(time.Now().Add(5 * time.Second))
	refuse := func(why string) {
		f.log.Warn("descriptor claim refused", "why", why)
		_ = fdpass.Send(uc, enginewire.EncodeFDReply(0, why))
	}
	buf := make([]byte, 64)
	n, err := uc.Read(buf)
	if err != nil {
		return
	}
	tok, err := enginewire.DecodeFDRequest(buf[:n])
	if err != nil {
		refuse(err.Error())
		return
	}
	cred, err := uds.PeerCred(uc)
	if err != nil {
		refuse("cannot read peer credentials")
		return
	}
	f.mu.Lock()
	var o *fdOffer
	for k, v := range f.offers {
		if bytes.Equal([]byte(k), tok) {
			o = v
			delete(f.offers, k) // one claim per token
		}
	}
	f.mu.Unlock()
	switch {
	case o == nil:
		refuse("unknown or already claimed token: register again")
		return
	case time.Now().After(o.expiry):
		refuse("token expired: register again")
		return
	case o.uid >= 0 && int(cred.Uid) != o.uid:
		refuse(fmt.Sprintf("uid %d claimed descriptors registered by uid %d", cred.Uid, o.uid))
		return
	}
	if err := fdpass.Send(uc, enginewire.EncodeFDReply(len(o.fds), ""), o.fds...); err != nil {
		f.log.Warn("sending descriptors failed", "registration", o.reg, "error", err)
		return
	}
	f.log.Debug("descriptors sent", "registration", o.reg, "fds", len(o.fds))
}
