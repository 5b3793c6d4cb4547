package grpcserver

import (
	"crypto/rand"
	"crypto/subtle"
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
// engine socket; on top, the claimant's uid must be the registering one,
// and a claim refused for its uid leaves the token to that engine.
type fdServer struct {
	// live reports whether a registration is the live one; only its
	// offers may be claimed. Nil: every registration is.
	live func(reg string) bool
	log  hclog.Logger

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

func newFDServer(live func(reg string) bool, log hclog.Logger) *fdServer {
	return &fdServer{live: live, log: log, offers: map[string]*fdOffer{}}
}

func (f *fdServer) isLive(reg string) bool { return f.live == nil || f.live(reg) }

// offer records the descriptors a registration may claim and returns the
// token. Offers of registrations that are no longer live are withdrawn,
// and a claim checks again: only the live registration's pools may be
// claimed, whichever order two registrations' offers came in. Offers of
// the same registration stay (the processes of one connector-mode engine
// each claim their own). The descriptors stay owned by the pools.
func (f *fdServer) offer(reg string, uid int, fds []int) []byte {
	tok := make([]byte, enginewire.FDTokenLen)
	if _, err := rand.Read(tok); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for k, o := range f.offers {
		if now.After(o.expiry) || (o.reg != reg && !f.isLive(o.reg)) {
			delete(f.offers, k)
		}
	}
	f.offers[string(tok)] = &fdOffer{reg: reg, uid: uid, fds: append([]int(nil), fds...), expiry: now.Add(offerTTL)}
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

// claim takes the offer tok names for a claimant of uid, or says why not.
// Only a claim that succeeds, or finds the offer expired, removes it: a
// claim from the wrong uid must not consume the token, or any local
// process the socket admits that learns a token could burn the legitimate
// engine's registration (it would have to register again, and again).
func (f *fdServer) claim(tok []byte, uid int, now time.Time) (*fdOffer, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var key string
	var o *fdOffer
	for k, v := range f.offers {
		// Constant time: how fast a guess is refused says nothing of how
		// close it came.
		if subtle.ConstantTimeCompare([]byte(k), tok) == 1 {
			key, o = k, v
		}
	}
	switch {
	case o == nil:
		return nil, "unknown or already claimed token: register again"
	case now.After(o.expiry):
		delete(f.offers, key)
		return nil, "token expired: register again"
	case !f.isLive(o.reg):
		delete(f.offers, key)
		return nil, "the registration ended: register again"
	case o.uid >= 0 && uid != o.uid:
		return nil, fmt.Sprintf("uid %d claimed descriptors registered by uid %d", uid, o.uid)
	}
	delete(f.offers, key) // one claim per token
	return o, ""
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
	o, why := f.claim(tok, int(cred.Uid), time.Now())
	if o == nil {
		refuse(why)
		return
	}
	if err := fdpass.Send(uc, enginewire.EncodeFDReply(len(o.fds), ""), o.fds...); err != nil {
		f.log.Warn("sending descriptors failed", "registration", o.reg, "error", err)
		return
	}
	f.log.Debug("descriptors sent", "registration", o.reg, "fds", len(o.fds))
}
