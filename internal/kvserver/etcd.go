package kvserver

import (
	"context"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/etcdapi"
)

// The etcd v3 API (internal/etcdapi) is served by every node on its gRPC
// port, beside Canopy's own services and under the same TLS and
// authorization (security.MethodLevels). It runs over a client.DB that the
// node opens to itself on the first etcd request, with its node
// certificate: the etcd caller's own certificate was checked by the
// authorization interceptor before the handler runs.

// startEtcdAPI creates the etcd API server and registers its services on
// n.srv (before it serves).
func (n *Node) startEtcdAPI() error {
	o := n.cfg.EtcdAPI
	o.Address = n.cfg.AdvertiseAddr
	o.TLS = n.cfg.Certs != nil
	o.NodeID = n.NodeID
	o.Logger = n.log
	o.Open = func(ctx context.Context) (*client.DB, error) {
		// A short status-schedule extension: this client begins
		// transactions (the lease checks at start, etcd requests), and
		// each Begin extends the status encoding schedule by it; with a
		// client's default (5 minutes) every encoding change made after
		// it would take effect that far ahead
		// (TestBankStatusEncodingMigration).
		co := client.Options{Logger: n.log, StatusScheduleExtension: time.Second}
		if n.cfg.Certs != nil {
			co.TLS = n.cfg.Certs.PeerTLS()
		}
		return client.Open(ctx, []string{n.cfg.AdvertiseAddr}, client.WithOptions(co))
	}
	s, err := etcdapi.New(o)
	if err != nil {
		return err
	}
	n.etcd = s
	s.Register(n.srv)
	s.Start()
	return nil
}
