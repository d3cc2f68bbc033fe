package kvserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"
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
//	POST /debug/fault?heal=1                   clear every fault of this node
//
// A link fault is one-way (this node's sends to the peer): a symmetric
// partition is set on both ends.

// FaultMaxDelay bounds an injected link delay.
const FaultMaxDelay = 10 * time.Second

// faultState is what GET /debug/fault returns.
type faultState struct {
	Node  uint64                  `json:"node"`
	Links map[string]linkFaultDoc `json:"links"`
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
		n.log.Warn("fault injection: healed every link")
		return nil
	}
	peerStr := q.Get("peer")
	if peerStr == "" {
		return fmt.Errorf("invalid argument: give peer=NODE_ID or heal=1")
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
