// Package uds opens the host's Unix-domain sockets the way a helper that
// shares a machine with other tenants must (modelled on
// containerd shims and the kubelet device-plugin API):
//
//   - the socket lives in a private directory, 0700 (0710 with a group, so
//     the group can reach the socket but not list or create entries);
//   - the socket itself is 0600, or 0660 owned by the configured group;
//   - a stale socket left by a dead host is unlinked, but a live one is never
//     stolen: Listen fails and says another host is serving there;
//   - every accepted connection's peer uid is read with SO_PEERCRED and
//     checked against an allow-list; refused peers are closed and logged;
//   - abstract sockets are never used: file permissions are the first fence.
package uds

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Options says where a socket goes and who may connect.
type Options struct {
	// Path is the socket's file path; its directory is created (or tightened)
	// to the private mode.
	Path string
	// Group, when set (a name or a numeric gid), makes the socket 0660 and
	// owned by that group, for engines running as another user in it.
	Group string
	// AllowUIDs lists the peer uids accepted besides the host's own uid.
	AllowUIDs []int
	// Log receives refusals; nil discards them.
	Log hclog.Logger
}

// ErrInUse means a live process already serves on the path.
var ErrInUse = errors.New("socket in use by a live process")

// Listener is a net.Listener that only returns connections from allowed
// peers.
type Listener struct {
	*net.UnixListener
	path  string
	allow atomic.Pointer[map[int]bool]
	log   hclog.Logger
}

// Listen prepares the directory, clears a stale socket and listens.
func Listen(o Options) (*Listener, error) {
	if o.Path == "" {
		return nil, errors.New("uds: empty socket path")
	}
	if len(o.Path) >= 108 {
		return nil, fmt.Errorf("uds: socket path %q is %d bytes; Unix sockets allow 107: use a shorter directory", o.Path, len(o.Path))
	}
	gid := -1
	if o.Group != "" {
		g, err := lookupGroup(o.Group)
		if err != nil {
			return nil, err
		}
		gid = g
	}
	dir := filepath.Dir(o.Path)
	if err := privateDir(dir, gid); err != nil {
		return nil, err
	}
	if err := clearStale(o.Path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: o.Path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("uds: listen on %s: %w", o.Path, err)
	}
	// Remove the file on Close, but only if it is still ours.
	ln.SetUnlinkOnClose(true)
	mode := os.FileMode(0o600)
	if gid >= 0 {
		mode = 0o660
		if err := os.Chown(o.Path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("uds: give %s to group %s: %w", o.Path, o.Group, err)
		}
	}
	if err := os.Chmod(o.Path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("uds: chmod %s: %w", o.Path, err)
	}
	log := o.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	l := &Listener{UnixListener: ln, path: o.Path, log: log}
	l.SetAllowUIDs(o.AllowUIDs)
	return l, nil
}

// SetAllowUIDs replaces the allow-list (the host's own uid is always
// allowed); connections already accepted are unaffected. Safe to call while
// serving, e.g. on a config reload.
func (l *Listener) SetAllowUIDs(uids []int) {
	allow := map[int]bool{os.Getuid(): true}
	for _, u := range uids {
		allow[u] = true
	}
	l.allow.Store(&allow)
}

func (l *Listener) allowed(uid int) bool { return (*l.allow.Load())[uid] }

// Accept returns the next connection from an allowed peer. Refused peers are
// closed here and never reach the caller.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cred, err := PeerCred(c)
		if err != nil {
			l.log.Warn("refused connection: cannot read peer credentials", "socket", l.path, "error", err)
			c.Close()
			continue
		}
		if !l.allowed(int(cred.Uid)) {
			l.log.Warn("refused connection from a uid not on the allow-list",
				"socket", l.path, "uid", cred.Uid, "pid", cred.Pid,
				"hint", "add the engine's uid to the socket's allow_uids")
			c.Close()
			continue
		}
		return c, nil
	}
}

// Path is the socket's file path.
func (l *Listener) Path() string { return l.path }

// PeerCred returns the connecting process's credentials.
func PeerCred(c *net.UnixConn) (*syscall.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, serr
}

// privateDir creates dir with mode 0700 (0710 and the group when gid >= 0),
// or tightens an existing directory we own (leaving a 0710 one, which a
// grouped socket beside this one needs). A directory owned by someone else
// is refused: they could swap the socket under us.
func privateDir(dir string, gid int) error {
	mode := os.FileMode(0o700)
	if gid >= 0 {
		mode = 0o710
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("uds: create socket directory %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("uds: socket directory %s: %w", dir, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("uds: socket directory %s is owned by uid %d, not this process (uid %d): choose a directory of our own", dir, st.Uid, os.Getuid())
	}
	if gid >= 0 {
		if err := os.Chown(dir, -1, gid); err != nil {
			return fmt.Errorf("uds: give socket directory %s to gid %d: %w", dir, gid, err)
		}
	}
	if gid < 0 && fi.Mode().Perm() == 0o710 {
		// Another socket in this directory (the Engine socket beside
		// Control, say) opened it to its group: keep that group's
		// traverse right. It reaches no socket here but that one, since
		// this socket's own mode is 0600; tightening to 0700 would
		// silently cut the other socket's group off.
		return nil
	}
	if fi.Mode().Perm() != mode {
		if err := os.Chmod(dir, mode); err != nil {
			return fmt.Errorf("uds: chmod socket directory %s: %w", dir, err)
		}
	}
	return nil
}

// clearStale removes a socket file nobody listens on. Anything that is not a
// socket is left alone and reported.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("uds: %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("uds: %s exists and is not a socket; move it away or choose another path", path)
	}
	c, err := net.DialTimeout("unix", path, 200*time.Millisecond)
	if err == nil {
		c.Close()
		return fmt.Errorf("uds: %s: %w (is another kvpilot host running?)", path, ErrInUse)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("uds: remove stale socket %s: %w", path, err)
	}
	return nil
}

func lookupGroup(name string) (int, error) {
	if gid, err := strconv.Atoi(name); err == nil {
		return gid, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("uds: socket group %q: %w", name, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, fmt.Errorf("uds: socket group %q has gid %q: %w", name, g.Gid, err)
	}
	return gid, nil
}
