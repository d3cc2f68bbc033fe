package client

import (
	"crypto/tls"

	"github.com/canopy-db/canopy/internal/security"
)

// LoadTLS reads the cluster's CA certificate (ca.crt) and user's client
// certificate and key (client.USER.crt, client.USER.key) from certsDir,
// as `canopy cert` writes them, and returns the configuration for
// Options.TLS. It checks that the certificate is user's and that the CA
// signed it.
func LoadTLS(certsDir, user string) (*tls.Config, error) {
	return security.LoadClientTLS(certsDir, user)
}
