package nemesis

import (
	"context"
	"net"
	"sync"
)

// cutter cuts the workload client off from chosen node addresses
// (KindClientCut) while the nodes still reach each other: a connection to
// a cut address delivers nothing either way (a read that returned data
// holds it, a write waits) until the cut heals, as a network that drops
// packets and then lets TCP's retransmissions through; a new connection
// to it waits the same way. The client's connections go through Dial
// (grpc.WithContextDialer).
type cutter struct {
	mu     sync.Mutex
	cut    map[string]bool
	healed chan struct{} // closed and replaced at each heal
}

func newCutter() *cutter {
	return &cutter{cut: map[string]bool{}, healed: make(chan struct{})}
}

// set cuts addr off, or heals every cut (addr "").
func (c *cutter) set(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addr != "" {
		c.cut[addr] = true
		return
	}
	c.cut = map[string]bool{}
	close(c.healed)
	c.healed = make(chan struct{})
}

// wait blocks while addr is cut, until ctx ends or done closes.
func (c *cutter) wait(ctx context.Context, addr string, done <-chan struct{}) error {
	for {
		c.mu.Lock()
		cut, healed := c.cut[addr], c.healed
		c.mu.Unlock()
		if !cut {
			return nil
		}
		select {
		case <-healed:
		case <-done:
			return net.ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Dial is the client's dialer.
func (c *cutter) Dial(ctx context.Context, addr string) (net.Conn, error) {
	if err := c.wait(ctx, addr, nil); err != nil {
		return nil, err
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: conn, c: c, addr: addr, closed: make(chan struct{})}, nil
}

type cutConn struct {
	net.Conn
	c      *cutter
	addr   string
	once   sync.Once
	closed chan struct{}
}

func (cc *cutConn) Read(b []byte) (int, error) {
	n, err := cc.Conn.Read(b)
	if werr := cc.c.wait(context.Background(), cc.addr, cc.closed); werr != nil {
		return 0, werr
	}
	return n, err
}

func (cc *cutConn) Write(b []byte) (int, error) {
	if err := cc.c.wait(context.Background(), cc.addr, cc.closed); err != nil {
		return 0, err
	}
	return cc.Conn.Write(b)
}

func (cc *cutConn) Close() error {
	cc.once.Do(func() { close(cc.closed) })
	return cc.Conn.Close()
}
