package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// Open against addresses where nothing listens fails with ErrUnavailable
// saying so once the dial timeout has passed, instead of retrying for the
// whole SendAttemptsMax.
func TestOpenNothingListening(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	o := testOptions()
	// Long enough that a loaded machine sees the refusal before the
	// timeout: the assertion is on the error reported, not on timing.
	o.DialTimeout = time.Second
	_, err = Open(context.Background(), []string{addr}, WithOptions(o))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach any node of "+addr) ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Open with nothing listening: %v; want ErrUnavailable naming the address and the last error", err)
	}
}

// A seed node that accepts connections but never answers (a stopped
// process) costs Open one LookupTimeout, not RPCTimeout: the next seed
// answers.
func TestOpenSkipsSilentNode(t *testing.T) {
	silent := silentListener(t)
	c := newFakeCluster(t, 1)
	o := testOptions()
	o.RPCTimeout = time.Hour // an attempt at the silent node must not wait for it
	o.LookupTimeout = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := Open(ctx, []string{silent.Addr().String(), c.addrs()[0]}, WithOptions(o))
	if err != nil {
		t.Fatalf("Open with a silent first seed: %v", err)
	}
	defer db.Close()
	mustPut(t, db, "a", "1")
}

// With a dial timeout, Open asks every seed at once: a silent first seed
// costs nothing even when one attempt at it could take the whole dial
// timeout (the review's case: --dial-timeout and the lookup timeout both
// 2s made Open fail).
func TestOpenSilentSeedWithDialTimeout(t *testing.T) {
	silent := silentListener(t)
	c := newFakeCluster(t, 1)
	o := testOptions()
	// Equal, as the CLI's defaults (2s each): one attempt at the silent
	// seed would take the whole dial timeout.
	o.DialTimeout, o.LookupTimeout = 5*time.Second, 5*time.Second
	db, err := Open(context.Background(), []string{silent.Addr().String(), c.addrs()[0]}, WithOptions(o))
	if err != nil {
		t.Fatalf("Open with a silent first seed: %v", err)
	}
	defer db.Close()
	if db.Settings() == nil {
		t.Fatal("no cluster settings after Open")
	}
}

// silentListener accepts connections and never answers on them, as a
// stopped process's socket does; closed with the test.
func silentListener(t *testing.T) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, conn) // held open, never answered
		}
	}()
	return l
}
