package kvserver

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/canopy-db/canopy/internal/security"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Transport security and authorization of the node's RPCs (the rules are
// internal/security's; see its doc.go). With Config.Certs:
//
//   - the gRPC server speaks TLS with the node certificate and verifies
//     any client certificate against the CA; a handshake that fails (no
//     TLS, a certificate of another CA) is refused and logged here,
//     rate-limited per remote host;
//   - every RPC passes authUnary or authStream first, which apply
//     security.Authorize to the verified certificate's user and refuse,
//     with codes.Unauthenticated or codes.PermissionDenied and a log line,
//     what the user may not do, before any handler runs;
//   - the node dials its peers with its node certificate and checks
//     theirs (peerCredentials).
//
// With Config.Insecure, none of this: plaintext, and every caller may do
// everything.

// serverCredentials are the gRPC server's transport credentials.
func (n *Node) serverCredentials() credentials.TransportCredentials {
	if n.cfg.Certs == nil {
		return insecure.NewCredentials()
	}
	return &handshakeLogger{TransportCredentials: credentials.NewTLS(n.cfg.Certs.ServerTLS()), n: n}
}

// peerCredentials are the transport credentials of the node's outgoing
// connections to its peers.
func (n *Node) peerCredentials() credentials.TransportCredentials {
	if n.cfg.Certs == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(n.cfg.Certs.PeerTLS())
}

// logSecurity says, once at start, how the node is secured.
func (n *Node) logSecurity() {
	if n.cfg.Certs == nil {
		n.log.Warn("running insecure: no TLS and no authentication; anyone who can reach this node's ports can read, write and administer the cluster (start with --certs-dir to secure it)",
			"addr", n.cfg.AdvertiseAddr)
		return
	}
	c := n.cfg.Certs
	n.log.Info("serving with mutual TLS", "certs_dir", c.Dir, "node_cert_hosts", c.Hosts(),
		"node_cert_expires", c.NotAfter.Format(time.RFC3339), "admin_user", n.cfg.AdminUser)
}

// handshakeLogger logs the TLS handshakes the server refuses.
type handshakeLogger struct {
	credentials.TransportCredentials
	n *Node
}

func (h *handshakeLogger) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	remote := raw.RemoteAddr().String()
	conn, info, err := h.TransportCredentials.ServerHandshake(raw)
	// io.EOF: the other side closed without a word (a port probe).
	if err != nil && !errors.Is(err, io.EOF) {
		host, _, _ := net.SplitHostPort(remote)
		if h.n.identityLog.due("tls " + host) {
			h.n.log.Warn("refused a connection: its TLS handshake failed (a client or node without TLS, or with a certificate the cluster's CA did not sign)",
				"peer", remote, "err", err)
		}
	}
	return conn, info, err
}

func (h *handshakeLogger) Clone() credentials.TransportCredentials {
	return &handshakeLogger{TransportCredentials: h.TransportCredentials.Clone(), n: h.n}
}

// authorize applies security.Authorize to an incoming RPC and logs a
// refusal (rate-limited per peer host, user and method).
func (n *Node) authorize(ctx context.Context, method string, req any) error {
	if n.cfg.Certs == nil {
		return nil
	}
	user := security.PeerUser(ctx)
	err := security.Authorize(method, user, n.cfg.AdminUser, req)
	if err == nil {
		return nil
	}
	remote := "unknown"
	if p, ok := grpcpeer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	host, _, _ := net.SplitHostPort(remote)
	who := user
	if who == "" {
		who = "(no certificate)"
	}
	if n.identityLog.due("auth " + host + " " + user + " " + method) {
		n.log.Warn("refused an RPC", "method", method, "user", who, "peer", remote, "code", status.Code(err).String(),
			"reason", status.Convert(err).Message())
	}
	return err
}

// authUnary is the server's unary interceptor of authorize.
func (n *Node) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := n.authorize(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// authStream is the server's stream interceptor of authorize (no stream's
// authorization depends on its messages).
func (n *Node) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := n.authorize(ss.Context(), info.FullMethod, nil); err != nil {
		return err
	}
	return h(srv, ss)
}
