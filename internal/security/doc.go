// Package security holds Canopy's certificates and who may call what.
//
// Certificates (certs.go). A cluster has one certificate authority (CA).
// Every node has a node certificate, signed by the CA, with the common
// name NodeUser ("node"), the hosts and addresses it is reached by as
// subject alternative names, and both the server and the client extended
// key usage: a node serves clients and peers, and dials its peers, with
// the same certificate. Every client user has a client certificate with
// the user's name as common name and the client usage only. The files in
// a certificates directory are named as CockroachDB names them: ca.crt,
// node.crt, node.key, client.USER.crt, client.USER.key; the CA's key,
// ca.key, is written beside them unless a separate path is given (nodes
// and clients never read it). Keys are ECDSA P-256, written 0600; nothing
// is overwritten unless asked. Everything is done with crypto/x509,
// crypto/ecdsa and crypto/tls of the standard library.
//
// TLS (tls.go). A node's gRPC server asks for a client certificate and
// verifies any it is given against the CA (tls.VerifyClientCertIfGiven):
// a certificate signed by another CA fails the handshake. A connection
// without a certificate is allowed at the TLS level only so that the
// gRPC health service stays open to health checkers; every other RPC on
// it is refused by the authorization check below (codes.Unauthenticated),
// which names the problem instead of a bare handshake failure. This is
// CockroachDB's choice too. Clients and nodes verify the server's
// certificate against the CA and its address against the certificate's
// names. The HTTP server (status page, metrics, health) serves HTTPS
// with the node certificate and verifies a client certificate if one is
// given, requiring none: what it serves is read-only and open to anyone
// who reaches the port, except the status page's user keys (range
// boundaries), which it shows only to a verified client
// (internal/statuspage).
//
// Authorization (authz.go). Authorize is a pure function of the method,
// the caller's user (the verified certificate's common name) and, for
// KV.Batch, the request: every gRPC method has a Level in one table,
// MethodLevels, and a method missing from it is refused (fail closed).
// The node user may call everything; the admin user (AdminUserDefault,
// "root", or the node's --admin-user) everything but the Internal
// service; any other user the KV data path, and no write of a system key
// other than the transaction status and heartbeat records (so the
// cluster's settings, meta and node records are the admin's). The
// interceptor that applies it sits in kvserver/auth.go.
//
// Without certificates (insecure mode, `canopy start --insecure`) there
// is no TLS and no authorization: anyone who can reach a node's port can
// read, write and administer the cluster.
package security
