package security

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names in a certificates directory (as CockroachDB names them).
const (
	CACertFile   = "ca.crt"
	CAKeyFile    = "ca.key"
	NodeCertFile = "node.crt"
	NodeKeyFile  = "node.key"
)

// ClientCertFile and ClientKeyFile name user's client certificate and key.
func ClientCertFile(user string) string { return "client." + user + ".crt" }
func ClientKeyFile(user string) string  { return "client." + user + ".key" }

// Users with a meaning of their own.
const (
	// NodeUser is the common name of every node certificate; a caller
	// presenting it may call every RPC, the Internal service included.
	NodeUser = "node"
	// AdminUserDefault is the user allowed the administrative RPCs unless
	// a node is configured with another (kvserver.Config.AdminUser).
	AdminUserDefault = "root"
)

// Limits and defaults of certificate creation.
const (
	// CAValidityDefault and CertValidityDefault are how long a new CA and
	// a new node or client certificate are valid (CockroachDB's defaults:
	// 10 and 5 years). A certificate never outlives its CA.
	CAValidityDefault   = 10 * 365 * 24 * time.Hour
	CertValidityDefault = 5 * 365 * 24 * time.Hour
	// ValidityMin bounds the validity an operator may ask for.
	ValidityMin = time.Hour
	// NotBeforeBackdate: a new certificate is valid from this long before
	// it was made, so that a machine whose clock is behind the creator's
	// accepts it at once.
	NotBeforeBackdate = time.Hour
	// UserNameBytesMax bounds a user name (a certificate's common name).
	UserNameBytesMax = 63
	// HostsMax bounds the names and addresses of one node certificate.
	HostsMax = 100
	// HostBytesMax bounds one of them (a DNS name's limit).
	HostBytesMax = 253
	// CertFileBytesMax bounds a certificate or key file read.
	CertFileBytesMax = 1 << 20
)

// Key and certificate files' modes: keys are the owner's alone.
const (
	keyFileMode  fs.FileMode = 0o600
	certFileMode fs.FileMode = 0o644
	dirMode      fs.FileMode = 0o700
)

// CreateOptions are the options of CreateCA, CreateNode and CreateClient.
// Zero fields take defaults.
type CreateOptions struct {
	// CertsDir receives the certificates and keys (created if missing).
	// Required.
	CertsDir string
	// CAKeyPath is the CA's key: written by CreateCA, read by the others.
	// Default: CertsDir/ca.key. Nodes and clients never read it, so it may
	// (and in production should) live elsewhere.
	CAKeyPath string
	// Overwrite replaces existing files; without it, creation refuses to
	// replace any, before writing anything.
	Overwrite bool
	// Validity of the new certificate (default CAValidityDefault for a CA,
	// CertValidityDefault otherwise; capped at the CA's expiry).
	Validity time.Duration
	// Now is the clock (default time.Now; tests set it).
	Now func() time.Time
}

func (o *CreateOptions) ensureDefaults(def time.Duration) error {
	if o.CertsDir == "" {
		return errors.New("security: no certificates directory given (--certs-dir)")
	}
	if o.CAKeyPath == "" {
		o.CAKeyPath = filepath.Join(o.CertsDir, CAKeyFile)
	}
	if o.Validity == 0 {
		o.Validity = def
	}
	if o.Validity < ValidityMin {
		return fmt.Errorf("security: validity %v is below the minimum %v", o.Validity, ValidityMin)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// CreateCA makes a new CA: CertsDir/ca.crt and its key at CAKeyPath.
// Every node and client certificate signed by a former CA must be made
// again (or the old ca.crt kept beside the new one: ca.crt may hold
// several certificates, and every one of them is trusted).
func CreateCA(o CreateOptions) error {
	if err := o.ensureDefaults(CAValidityDefault); err != nil {
		return err
	}
	crtPath := filepath.Join(o.CertsDir, CACertFile)
	if err := checkWritable(o.Overwrite, crtPath, o.CAKeyPath); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("security: generating the CA key: %w", err)
	}
	now := o.Now()
	tmpl, err := template(now, now.Add(o.Validity), "Canopy CA")
	if err != nil {
		return err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	// The CA signs node and client certificates only, never another CA.
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return fmt.Errorf("security: creating the CA certificate: %w", err)
	}
	if err := writeKey(o.CAKeyPath, key, o.Overwrite); err != nil {
		return err
	}
	return writePEM(crtPath, "CERTIFICATE", der, certFileMode, o.Overwrite)
}

// CreateNode makes CertsDir/node.crt and node.key, signed by the CA of
// CertsDir/ca.crt and CAKeyPath, for the given host names and IP
// addresses: every name and address clients and peers reach the node by
// (its --advertise or --listen host, load balancers' names) must be among
// them, since they check it.
func CreateNode(o CreateOptions, hosts []string) error {
	if err := o.ensureDefaults(CertValidityDefault); err != nil {
		return err
	}
	if len(hosts) == 0 {
		return errors.New("security: a node certificate needs at least one host name or IP address")
	}
	if len(hosts) > HostsMax {
		return fmt.Errorf("security: %d hosts, more than the %d a node certificate may name", len(hosts), HostsMax)
	}
	var ips []net.IP
	var dns []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if err := checkHostName(h); err != nil {
			return err
		}
		dns = append(dns, h)
	}
	return createLeaf(o, NodeCertFile, NodeKeyFile, NodeUser,
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, dns, ips)
}

// CreateClient makes CertsDir/client.USER.crt and client.USER.key, a
// client certificate of user signed by the CA.
func CreateClient(o CreateOptions, user string) error {
	if err := o.ensureDefaults(CertValidityDefault); err != nil {
		return err
	}
	if err := CheckUserName(user); err != nil {
		return err
	}
	if user == NodeUser {
		return fmt.Errorf("security: %q is the nodes' own user: make a node certificate (create-node) instead", NodeUser)
	}
	return createLeaf(o, ClientCertFile(user), ClientKeyFile(user), user,
		[]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil)
}

// CheckUserName refuses a user name that cannot be a certificate's common
// name and part of a file name: 1 to UserNameBytesMax bytes of ASCII
// letters, digits, '_', '-' and '.', not starting with '.'.
func CheckUserName(user string) error {
	if user == "" || len(user) > UserNameBytesMax {
		return fmt.Errorf("security: user name %q: want 1 to %d characters", user, UserNameBytesMax)
	}
	for i, c := range user {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' && i > 0
		if !ok {
			return fmt.Errorf("security: user name %q: character %q at %d; want ASCII letters, digits, '_', '-' and '.' (not first)", user, c, i)
		}
	}
	return nil
}

// checkHostName refuses a host that is neither an IP address nor a DNS
// name (labels of letters, digits and '-'; a leading "*." wildcard).
func checkHostName(h string) error {
	if h == "" || len(h) > HostBytesMax {
		return fmt.Errorf("security: host %q: want an IP address or a DNS name of 1 to %d characters", h, HostBytesMax)
	}
	for i, label := range strings.Split(strings.TrimPrefix(h, "*."), ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("security: host %q: label %d is empty or longer than 63 characters", h, i+1)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("security: host %q: character %q is not allowed in a DNS name (want an IP address or a DNS name)", h, c)
			}
		}
	}
	return nil
}

// createLeaf signs a node or client certificate with the CA.
func createLeaf(o CreateOptions, crtName, keyName, commonName string, usage []x509.ExtKeyUsage, dns []string, ips []net.IP) error {
	crtPath, keyPath := filepath.Join(o.CertsDir, crtName), filepath.Join(o.CertsDir, keyName)
	if err := checkWritable(o.Overwrite, crtPath, keyPath); err != nil {
		return err
	}
	caCert, caKey, err := loadCA(filepath.Join(o.CertsDir, CACertFile), o.CAKeyPath)
	if err != nil {
		return err
	}
	now := o.Now()
	if now.After(caCert.NotAfter) {
		return fmt.Errorf("security: the CA (%s) expired on %s: create a new CA", filepath.Join(o.CertsDir, CACertFile), caCert.NotAfter.Format(time.RFC3339))
	}
	notAfter := now.Add(o.Validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("security: generating a key: %w", err)
	}
	tmpl, err := template(now, notAfter, commonName)
	if err != nil {
		return err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = usage
	tmpl.DNSNames, tmpl.IPAddresses = dns, ips
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("security: signing %s: %w", crtName, err)
	}
	if err := writeKey(keyPath, key, o.Overwrite); err != nil {
		return err
	}
	return writePEM(crtPath, "CERTIFICATE", der, certFileMode, o.Overwrite)
}

// template is a certificate valid over [now-NotBeforeBackdate, notAfter]
// with a random 128-bit serial number.
func template(now, notAfter time.Time, commonName string) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("security: serial number: %w", err)
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"Canopy"}},
		NotBefore:    now.Add(-NotBeforeBackdate),
		NotAfter:     notAfter,
	}, nil
}

// checkWritable refuses, before anything is written, when a file exists
// and overwrite is off.
func checkWritable(overwrite bool, paths ...string) error {
	if overwrite {
		return nil
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("security: %s exists; pass --overwrite to replace it", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("security: %w", err)
		}
	}
	return nil
}

func writeKey(path string, key *ecdsa.PrivateKey, overwrite bool) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("security: encoding a key: %w", err)
	}
	return writePEM(path, "PRIVATE KEY", der, keyFileMode, overwrite)
}

// writePEM writes one PEM block to path with mode (also when it replaces
// a file of another mode), synced; without overwrite it never replaces a
// file (O_EXCL).
func writePEM(path, blockType string, der []byte, mode fs.FileMode, overwrite bool) error {
	if err := os.MkdirAll(filepath.Dir(path), dirMode); err != nil {
		return fmt.Errorf("security: %w", err)
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if overwrite {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, mode)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("security: %s exists; pass --overwrite to replace it", path)
		}
		return fmt.Errorf("security: %w", err)
	}
	err = f.Chmod(mode) // a replaced file keeps its old mode otherwise
	if err == nil {
		err = pem.Encode(f, &pem.Block{Type: blockType, Bytes: der})
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("security: writing %s: %w", path, err)
	}
	return nil
}

// readFile reads a certificate or key file of at most CertFileBytesMax.
func readFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	if st.Size() > CertFileBytesMax {
		return nil, fmt.Errorf("security: %s is %d bytes, more than a certificate file may be (%d)", path, st.Size(), CertFileBytesMax)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	return b, nil
}

// loadCA reads the CA's certificate (the first of crtPath) and key.
func loadCA(crtPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	certs, err := readCerts(crtPath)
	if err != nil {
		return nil, nil, err
	}
	b, err := readFile(keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (the CA key: --ca-key)", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, nil, fmt.Errorf("security: %s holds no PEM block", keyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("security: %s: %w", keyPath, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("security: %s: key of type %T cannot sign", keyPath, k)
	}
	ca := certs[0]
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("security: %s is not a CA certificate", crtPath)
	}
	if pub, ok := ca.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(signer.Public()) {
		return nil, nil, fmt.Errorf("security: the key %s is not the key of the CA certificate %s", keyPath, crtPath)
	}
	return ca, signer, nil
}

// readCerts parses every certificate of a PEM file (at least one).
func readCerts(path string) ([]*x509.Certificate, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("security: %s: %w", path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("security: %s holds no certificate", path)
	}
	return out, nil
}
