package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/canopy-db/canopy/internal/security"
	"github.com/spf13/cobra"
)

// canopy cert: make the cluster's CA, node and client certificates
// (internal/security/certs.go) in --certs-dir.
func init() {
	var caKey string
	var overwrite bool
	var lifetime time.Duration
	opts := func() (security.CreateOptions, error) {
		if conn.certsDir == "" {
			return security.CreateOptions{}, usageErrorf("--certs-dir is required (or CANOPY_CERTS_DIR)")
		}
		if lifetime != 0 && lifetime < security.ValidityMin {
			return security.CreateOptions{}, usageErrorf("--lifetime %v is below the minimum %v", lifetime, security.ValidityMin)
		}
		return security.CreateOptions{CertsDir: conn.certsDir, CAKeyPath: caKey, Overwrite: overwrite, Validity: lifetime}, nil
	}
	cert := &cobra.Command{
		Use:   "cert",
		Short: "Create the cluster's CA, node and client certificates",
		Long: `Create the certificates of a secure cluster in --certs-dir:

  canopy cert create-ca                  ca.crt, and the CA's key (--ca-key, default --certs-dir/ca.key)
  canopy cert create-node HOST...        node.crt and node.key, for every host name and IP address
                                         clients and peers reach the node by
  canopy cert create-client NAME         client.NAME.crt and client.NAME.key (NAME root: the admin user)

Every node needs ca.crt, node.crt and node.key in its --certs-dir; every client ca.crt and its
client.NAME.crt/key. Nodes and clients never read the CA's key: keep it off the nodes (--ca-key).
Keys are written with mode 0600; existing files are kept unless --overwrite is given.`,
	}
	pf := cert.PersistentFlags()
	pf.StringVar(&conn.certsDir, "certs-dir", "", "directory to write the certificates and keys to (env CANOPY_CERTS_DIR)")
	pf.StringVar(&caKey, "ca-key", "", "the CA's key: written by create-ca, read by create-node and create-client (default: --certs-dir/ca.key)")
	pf.BoolVar(&overwrite, "overwrite", false, "replace existing certificate and key files")
	pf.DurationVar(&lifetime, "lifetime", 0, fmt.Sprintf("validity of the new certificate (default %v for a CA, %v otherwise; never beyond the CA's)",
		security.CAValidityDefault, security.CertValidityDefault))

	createCA := &cobra.Command{Use: "create-ca", Args: cobra.NoArgs, Short: "Create the cluster's certificate authority",
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := opts()
			if err != nil {
				return err
			}
			if err := security.CreateCA(o); err != nil {
				return err
			}
			key := caKey
			if key == "" {
				key = filepath.Join(conn.certsDir, security.CAKeyFile)
			}
			fmt.Printf("wrote %s and %s\n", filepath.Join(conn.certsDir, security.CACertFile), key)
			return nil
		}}
	createNode := &cobra.Command{Use: "create-node HOST...", Args: cobra.MinimumNArgs(1),
		Short: "Create the node certificate, valid for the given host names and IP addresses",
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := opts()
			if err != nil {
				return err
			}
			if err := security.CreateNode(o, args); err != nil {
				return err
			}
			fmt.Printf("wrote %s and %s\n", filepath.Join(conn.certsDir, security.NodeCertFile), filepath.Join(conn.certsDir, security.NodeKeyFile))
			return nil
		}}
	createClient := &cobra.Command{Use: "create-client NAME", Args: cobra.ExactArgs(1),
		Short: "Create a client certificate for user NAME",
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := opts()
			if err != nil {
				return err
			}
			if err := security.CreateClient(o, args[0]); err != nil {
				return err
			}
			fmt.Printf("wrote %s and %s\n", filepath.Join(conn.certsDir, security.ClientCertFile(args[0])), filepath.Join(conn.certsDir, security.ClientKeyFile(args[0])))
			return nil
		}}
	cert.AddCommand(createCA, createNode, createClient)
	rootCmd.AddCommand(cert)
}
