package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/replica"
)

// Limits of the node's flags: each is refused at start, with a message
// naming the flag and its allowed range, rather than failing later.
const (
	// RaftTickMin and RaftTickMax bound --raft-tick: below the minimum the
	// ticker alone burns a CPU; above the maximum a failover takes minutes.
	RaftTickMin = 10 * time.Millisecond
	RaftTickMax = 10 * time.Second
	// ReplicationFactorMax bounds --replication-factor.
	ReplicationFactorMax = 9
	// DNSLookupTimeout bounds the check that --join's hosts resolve.
	DNSLookupTimeout = 5 * time.Second
)

// checkRange refuses v outside [lo, hi], naming the flag.
func checkRange[T int | int64 | uint64 | time.Duration](flag string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("--%s %v is outside [%v, %v]", flag, v, lo, hi)
	}
	return nil
}

// checkHostPort refuses an address that is not host:port with a port in
// [0, 65535] (0: any port, for --listen only when zeroOK) and, if resolve,
// a host name that does not resolve.
func checkHostPort(flag, addr string, zeroOK, resolve bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s %q: want host:port: %v", flag, addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 || (p == 0 && !zeroOK) {
		return fmt.Errorf("--%s %q: port %q is not in [1, 65535]", flag, addr, port)
	}
	if resolve && host != "" && net.ParseIP(host) == nil {
		r := &net.Resolver{}
		ctx, cancel := context.WithTimeout(context.Background(), DNSLookupTimeout)
		defer cancel()
		if _, err := r.LookupHost(ctx, host); err != nil {
			return fmt.Errorf("--%s %q: host %q does not resolve: %v", flag, addr, host, err)
		}
	}
	return nil
}

// checkStartFlags validates `canopy start`'s flags.
func checkStartFlags(listen, advertise string, join []string, tick time.Duration, threshold int, sched replica.SchedulerConfig) error {
	if err := checkHostPort("listen", listen, true, true); err != nil {
		return err
	}
	if advertise != "" {
		if err := checkHostPort("advertise", advertise, false, true); err != nil {
			return err
		}
	}
	for _, a := range join {
		if err := checkHostPort("join", a, false, true); err != nil {
			return err
		}
	}
	if err := checkRange("raft-tick", tick, RaftTickMin, RaftTickMax); err != nil {
		return err
	}
	if err := checkRange("value-threshold", threshold, 1, keys.ValueBytesMax); err != nil {
		return err
	}
	if err := checkRange("raft-workers", sched.Workers, 0, replica.SchedulerWorkersMax); err != nil {
		return err
	}
	return checkRange("raft-batch-ranges", sched.BatchRangesMax, 0, replica.SchedulerBatchRangesLimit)
}

// checkInitFlags validates `canopy init`'s flags.
func checkInitFlags(host string, ranges, rf int, encoding string) error {
	if err := checkHostPort("host", host, false, true); err != nil {
		return err
	}
	if err := checkRange("initial-ranges", ranges, 1, kvserver.InitialRangesMax); err != nil {
		return err
	}
	if err := checkRange("replication-factor", rf, 1, ReplicationFactorMax); err != nil {
		return err
	}
	if encoding != "tickets" && encoding != "v1" {
		return fmt.Errorf("--status-encoding %q: want tickets or v1", encoding)
	}
	return nil
}
