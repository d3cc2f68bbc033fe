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
	// ScrubIntervalMin and ScrubIntervalMax bound --scrub-interval.
	ScrubIntervalMin = time.Second
	ScrubIntervalMax = 365 * 24 * time.Hour
	// DeadNodeTimeoutMax bounds --dead-node-timeout.
	DeadNodeTimeoutMax = 7 * 24 * time.Hour
	// DNSLookupTimeout bounds the check that --join's hosts resolve.
	DNSLookupTimeout = 10 * time.Second
	// DNSRetryInterval is the pause between lookups of a --join host that
	// does not resolve yet.
	DNSRetryInterval = 250 * time.Millisecond
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
		// Retried until DNSLookupTimeout: in a container network (Docker,
		// Kubernetes) a peer's name resolves only once its container is
		// up, which may be a moment after this node's.
		r := &net.Resolver{}
		ctx, cancel := context.WithTimeout(context.Background(), DNSLookupTimeout)
		defer cancel()
		for {
			_, err := r.LookupHost(ctx, host)
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("--%s %q: host %q does not resolve (for %v): %v", flag, addr, host, DNSLookupTimeout, err)
			case <-time.After(DNSRetryInterval):
			}
		}
	}
	return nil
}

// HTTPPortOffset: by default a node serves HTTP (status page, metrics, health) on its
// --listen host at the gRPC port plus this offset (26257 -> 27257), so
// that nodes started on consecutive gRPC ports, as in the README, get
// distinct HTTP ports too.
const HTTPPortOffset = 1000

// httpAddrOff is the --http-addr value that turns the HTTP server off.
const httpAddrOff = "off"

// resolveHTTPAddr returns the address `canopy start` serves HTTP on: flag
// itself if set ("" for off), else --listen's host with its port plus
// HTTPPortOffset (port 0 stays 0: any free port). listen has passed
// checkHostPort.
func resolveHTTPAddr(flag, listen string) (string, error) {
	switch flag {
	case httpAddrOff:
		return "", nil
	case "":
	default:
		if err := checkHostPort("http-addr", flag, true, true); err != nil {
			return "", err
		}
		if flag == listen {
			return "", fmt.Errorf("--http-addr %q is --listen's address; give HTTP a port of its own", flag)
		}
		return flag, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--listen %q: %v", listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("--listen %q: port %q is not a number", listen, port)
	}
	if p == 0 {
		return net.JoinHostPort(host, "0"), nil
	}
	if p+HTTPPortOffset > 65535 {
		return "", fmt.Errorf("--http-addr: the default, --listen's port %d plus %d, is above 65535: set --http-addr HOST:PORT (or off)", p, HTTPPortOffset)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+HTTPPortOffset)), nil
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
	if encoding != "tickets" && encoding != "tickets-mix" && encoding != "v1" {
		return fmt.Errorf("--status-encoding %q: want tickets, tickets-mix or v1", encoding)
	}
	return nil
}
