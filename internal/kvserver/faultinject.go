package kvserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Fault injection (Config.FaultInjection, `canopy start
// --enable-fault-injection`): the node's HTTP server also serves
// /debug/fault, through which a nemesis (`canopy nemesis`) injects faults
// into a running process. Never on by default: without the flag the path
// does not exist (404).
//
//	GET  /debug/fault                          the faults in force (JSON)
//	POST /debug/fault?peer=ID&drop=1           drop every Raft message to node ID
//	POST /debug/fault?peer=ID&delay=200ms      delay every Raft message to node ID
//	POST /debug/fault?peer=ID                  clear the fault on that link
//	POST /debug/fault?disk=stall&for=5s        every fsync of the store waits 5s
//	POST /debug/fault?disk=sync-error          every fsync of the store fails
//	POST /debug/fault?disk=ok                  the store's fsyncs work again
//	POST /debug/fault?skew=-300ms              the oracle's clock runs 300ms behind
//	POST /debug/fault?lost-replies=2           the replies of the next 2 commit
//	                                           writes are lost after they applied
//	POST /debug/fault?heal=1                   clear every fault of this node
//
// A link fault is one-way (this node's sends to the peer): a symmetric
// partition is set on both ends. A failed fsync is fatal to Pebble, so the
// node stops (Storage.Fatal) once it meets one: a disk that loses writes
// must take its node down, never lose an acknowledged write. Clock skew
// moves only the physical part of the oracle's timestamps (the one clock
// timestamps come from; leases run on each node's monotonic clock and are
// bounded by replica.Config.ClockRateDriftMax, not by an offset), within
// FaultClockSkewMax. A lost commit reply is the case the client's
// ambiguous-commit lookup exists for: the status write (or one-phase
// commit) applied, and the client hears codes.Unavailable as if the
// connection had dropped.

// FaultMaxDelay bounds an injected link delay.
const FaultMaxDelay = 10 * time.Second

// FaultClockSkewMax bounds an injected clock skew, either way.
const FaultClockSkewMax = time.Second

// FaultLostRepliesMax bounds the commit replies one request may ask to lose.
const FaultLostRepliesMax = 100

// faultHooks are the node's fault-injection state (zero: no fault).
type faultHooks struct {
	skew        atomic.Int64 // nanoseconds added to the oracle's clock
	lostReplies atomic.Int64 // commit replies still to lose
}

// wrapFaultFS puts the store on a storage.FaultFS under FaultInjection.
func (c *Config) wrapFaultFS() {
	if !c.FaultInjection {
		return
	}
	if _, ok := c.Storage.FS.(*storage.FaultFS); !ok {
		c.Storage.FS = storage.NewFaultFS(c.Storage.FS)
	}
}

// oracleClock is the oracle's clock: time.Now, skewed under FaultInjection.
func (n *Node) oracleClock() func() time.Time {
	if !n.cfg.FaultInjection {
		return nil // tso's default, time.Now
	}
	return func() time.Time { return time.Now().Add(time.Duration(n.faults.skew.Load())) }
}

// faultUnary loses the reply of a Batch that wrote a commit (a status
// write or a one-phase commit) after it applied, while lost-replies lasts.
func (n *Node) faultUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if !n.cfg.FaultInjection || err != nil || info.FullMethod != rpcpb.KV_Batch_FullMethodName || n.faults.lostReplies.Load() <= 0 {
		return resp, err
	}
	br, ok := req.(*rpcpb.BatchRequest)
	out, _ := resp.(*rpcpb.BatchResponse)
	if !ok || out == nil || out.GetError() != nil || !writesCommit(br) {
		return resp, err
	}
	if n.faults.lostReplies.Add(-1) < 0 {
		n.faults.lostReplies.Store(0)
		return resp, err
	}
	n.log.Warn("fault injection: lost the reply of an applied commit write", "range", br.GetRangeId())
	return nil, status.Error(codes.Unavailable, "injected fault: the reply was lost after the write applied")
}

func writesCommit(br *rpcpb.BatchRequest) bool {
	for _, r := range br.GetRequests() {
		if r.GetPlainPutUnlessExists() != nil || r.GetCommitOnePc() != nil {
			return true
		}
	}
	return false
}

// faultState is what GET /debug/fault returns.
type faultState struct {
	Node        uint64                  `json:"node"`
	Links       map[string]linkFaultDoc `json:"links"`
	DiskStall   string                  `json:"disk_stall,omitempty"`
	SyncError   bool                    `json:"sync_error,omitempty"`
	Skew        string                  `json:"skew,omitempty"`
	LostReplies int64                   `json:"lost_replies,omitempty"`
}

type linkFaultDoc struct {
	Drop    bool   `json:"drop,omitempty"`
	DelayMs int64  `json:"delay_ms,omitempty"`
	Delay   string `json:"delay,omitempty"`
}

func (n *Node) registerFaultHandlers(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/fault", n.serveFaultGet)
	mux.HandleFunc("POST /debug/fault", n.serveFaultPost)
	n.log.Warn("fault injection is enabled (--enable-fault-injection): /debug/fault can break this node's links")
}

func (n *Node) serveFaultGet(w http.ResponseWriter, r *http.Request) {
	st := faultState{Node: n.NodeID(), Links: map[string]linkFaultDoc{}}
	n.transport.mu.Lock()
	ids := make([]uint64, 0, len(n.transport.mu.faults))
	for id := range n.transport.mu.faults {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		f := n.transport.mu.faults[id]
		if f == (LinkFault{}) {
			continue
		}
		st.Links[strconv.FormatUint(id, 10)] = linkFaultDoc{Drop: f.Drop, DelayMs: f.Delay.Milliseconds(), Delay: durString(f.Delay)}
	}
	n.transport.mu.Unlock()
	if fs, ok := n.cfg.Storage.FS.(*storage.FaultFS); ok {
		stall, failing := fs.Faults()
		st.DiskStall, st.SyncError = durString(stall.Round(time.Millisecond)), failing
	}
	st.Skew = durString(time.Duration(n.faults.skew.Load()))
	st.LostReplies = n.faults.lostReplies.Load()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

func durString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func (n *Node) serveFaultPost(w http.ResponseWriter, r *http.Request) {
	if err := n.applyFault(r); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n.serveFaultGet(w, r)
}

// applyFault applies the fault that r's query describes.
func (n *Node) applyFault(r *http.Request) error {
	q := r.URL.Query()
	if q.Get("heal") != "" {
		n.transport.mu.Lock()
		clear(n.transport.mu.faults)
		n.transport.mu.Unlock()
		if fs, ok := n.cfg.Storage.FS.(*storage.FaultFS); ok {
			fs.ClearFaults()
		}
		n.faults.skew.Store(0)
		n.faults.lostReplies.Store(0)
		n.log.Warn("fault injection: healed every fault")
		return nil
	}
	if s := q.Get("disk"); s != "" {
		return n.applyDiskFault(s, q.Get("for"))
	}
	if s := q.Get("skew"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid argument: skew %q: %v", s, err)
		}
		if d < -FaultClockSkewMax || d > FaultClockSkewMax {
			return fmt.Errorf("invalid argument: skew %v outside [-%v, %v]", d, FaultClockSkewMax, FaultClockSkewMax)
		}
		n.faults.skew.Store(int64(d))
		n.log.Warn("fault injection: oracle clock skew", "skew", d)
		return nil
	}
	if s := q.Get("lost-replies"); s != "" {
		k, err := strconv.ParseInt(s, 10, 64)
		if err != nil || k < 0 || k > FaultLostRepliesMax {
			return fmt.Errorf("invalid argument: lost-replies %q: want 0 to %d", s, FaultLostRepliesMax)
		}
		n.faults.lostReplies.Store(k)
		n.log.Warn("fault injection: lose commit replies", "count", k)
		return nil
	}
	peerStr := q.Get("peer")
	if peerStr == "" {
		return fmt.Errorf("invalid argument: give one of peer=NODE_ID, disk=, skew=, lost-replies= or heal=1")
	}
	peer, err := strconv.ParseUint(peerStr, 10, 64)
	if err != nil || peer == 0 {
		return fmt.Errorf("invalid argument: peer %q is not a node ID", peerStr)
	}
	var f LinkFault
	if s := q.Get("drop"); s != "" {
		if f.Drop, err = strconv.ParseBool(s); err != nil {
			return fmt.Errorf("invalid argument: drop %q: %v", s, err)
		}
	}
	if s := q.Get("delay"); s != "" {
		if f.Delay, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("invalid argument: delay %q: %v", s, err)
		}
		if f.Delay < 0 || f.Delay > FaultMaxDelay {
			return fmt.Errorf("invalid argument: delay %v outside [0, %v]", f.Delay, FaultMaxDelay)
		}
	}
	n.transport.SetLinkFault(peer, f)
	n.log.Warn("fault injection: link fault", "peer", peer, "drop", f.Drop, "delay", f.Delay)
	return nil
}

// applyDiskFault sets a fault on the store's FaultFS.
func (n *Node) applyDiskFault(kind, forStr string) error {
	fs, ok := n.cfg.Storage.FS.(*storage.FaultFS)
	if !ok {
		return fmt.Errorf("unavailable: the store is not on a fault-injecting file system")
	}
	switch kind {
	case "stall":
		d, err := time.ParseDuration(forStr)
		if err != nil || d <= 0 || d > storage.FaultStallMax {
			return fmt.Errorf("invalid argument: disk=stall needs for= in (0, %v], got %q", storage.FaultStallMax, forStr)
		}
		fs.StallSyncs(d)
	case "sync-error":
		fs.FailSyncs()
	case "ok":
		fs.ClearFaults()
	default:
		return fmt.Errorf("invalid argument: disk %q (want stall, sync-error or ok)", kind)
	}
	n.log.Warn("fault injection: disk fault", "disk", kind, "for", forStr)
	return nil
}
