package security

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"time"
)

// NodeCerts is what a node loads from its certificates directory: the
// CA's certificates, which it trusts, and its node certificate and key.
// Load once at start; a node picks up new files when it restarts.
type NodeCerts struct {
	// Dir is the certificates directory they were read from.
	Dir string
	// NotAfter is when the node certificate expires.
	NotAfter time.Time
	pool     *x509.CertPool
	cert     tls.Certificate
}

// LoadNodeCerts reads ca.crt, node.crt and node.key from dir and checks
// that the node certificate is a node's (common name NodeUser, both
// usages), is signed by the CA and is valid now.
func LoadNodeCerts(dir string) (*NodeCerts, error) {
	pool, err := loadPool(dir)
	if err != nil {
		return nil, err
	}
	cert, err := loadPair(dir, NodeCertFile, NodeKeyFile)
	if err != nil {
		return nil, err
	}
	leaf := cert.Leaf
	if leaf.Subject.CommonName != NodeUser {
		return nil, fmt.Errorf("security: %s is a certificate of %q, not of the nodes' user %q (make it with `canopy cert create-node`)",
			filepath.Join(dir, NodeCertFile), leaf.Subject.CommonName, NodeUser)
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			return nil, fmt.Errorf("security: %s does not verify against %s: %w", filepath.Join(dir, NodeCertFile), filepath.Join(dir, CACertFile), err)
		}
	}
	return &NodeCerts{Dir: dir, NotAfter: leaf.NotAfter, pool: pool, cert: cert}, nil
}

// Hosts returns the names and addresses the node certificate is valid for.
func (c *NodeCerts) Hosts() []string {
	out := append([]string(nil), c.cert.Leaf.DNSNames...)
	for _, ip := range c.cert.Leaf.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// ServerTLS is the node's gRPC server configuration: its certificate, and
// any client certificate verified against the CA (see doc.go for why a
// connection without one is let through to the authorization check).
func (c *NodeCerts) ServerTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{c.cert},
		ClientCAs:    c.pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		// Every peer and client is this binary's Go code: TLS 1.3 only.
		MinVersion: tls.VersionTLS13,
	}
}

// PeerTLS is the configuration a node dials its peers with: it presents
// its node certificate and verifies theirs against the CA.
func (c *NodeCerts) PeerTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{c.cert},
		RootCAs:      c.pool,
		MinVersion:   tls.VersionTLS13,
	}
}

// HTTPTLS is the configuration of the node's HTTPS server (status page,
// metrics, health): its certificate, and a client certificate verified
// against the CA if one is given, none required (the status page shows
// user keys only to a verified client). TLS 1.2 is allowed for health
// checkers, scrapers and browsers that lack 1.3.
func (c *NodeCerts) HTTPTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{c.cert},
		ClientCAs:    c.pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
	}
}

// LoadClientTLS reads ca.crt and user's client certificate and key from
// dir and returns the configuration a client dials nodes with.
func LoadClientTLS(dir, user string) (*tls.Config, error) {
	if err := CheckUserName(user); err != nil {
		return nil, err
	}
	pool, err := loadPool(dir)
	if err != nil {
		return nil, err
	}
	if user == NodeUser {
		return nil, fmt.Errorf("security: %q is the nodes' own user and has no client certificate", NodeUser)
	}
	crt, key := ClientCertFile(user), ClientKeyFile(user)
	cert, err := loadPair(dir, crt, key)
	if err != nil {
		return nil, err
	}
	if cn := cert.Leaf.Subject.CommonName; cn != user {
		return nil, fmt.Errorf("security: %s is a certificate of %q, not of %q", filepath.Join(dir, crt), cn, user)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("security: %s does not verify against %s: %w", filepath.Join(dir, crt), filepath.Join(dir, CACertFile), err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// LoadCATLS returns a configuration that verifies servers against dir's
// ca.crt and presents no certificate (health checks, HTTPS clients).
func LoadCATLS(dir string) (*tls.Config, error) {
	pool, err := loadPool(dir)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func loadPool(dir string) (*x509.CertPool, error) {
	certs, err := readCerts(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		if !c.IsCA {
			return nil, fmt.Errorf("security: %s holds a certificate of %q that is not a CA's", filepath.Join(dir, CACertFile), c.Subject.CommonName)
		}
		pool.AddCert(c)
	}
	return pool, nil
}

// loadPair reads a certificate and its key; Leaf is set.
func loadPair(dir, crtName, keyName string) (tls.Certificate, error) {
	crtPath, keyPath := filepath.Join(dir, crtName), filepath.Join(dir, keyName)
	crt, err := readFile(crtPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := readFile(keyPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("security: %s and %s: %w", crtPath, keyPath, err)
	}
	if cert.Leaf == nil { // set by X509KeyPair since Go 1.23
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("security: %s: %w", crtPath, err)
		}
	}
	return cert, nil
}
