package check

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Outcome is what a client learned about one single-key operation.
//
// The zero value is not an outcome: a recorder that forgets to set it gets
// ErrInvalidHistory instead of a silently wrong verdict.
type Outcome int

const (
	// OK: the operation took effect and its result is known.
	OK Outcome = iota + 1
	// Failed: the operation definitely did not take effect.
	Failed
	// Unknown: the operation may or may not have taken effect, at any time
	// after its call (timeout, lost connection, ambiguous-result error).
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Single-key operation kinds of a KVOp.
const (
	OpGet = "get"
	OpPut = "put"
	OpDel = "del"
)

// KVOp is one single-key operation of a recorded history.
type KVOp struct {
	// ClientID is the client that issued the operation, zero-based; it only
	// lays out porcupine's visualization.
	ClientID int
	// Kind is OpGet, OpPut or OpDel.
	Kind string
	Key  string
	// Value is the value written (OpPut) or read (OpGet, when Found).
	Value string
	// Found is the output of an OpGet: false means the key was absent.
	Found bool
	// Call and Return are the invocation and response times in nanoseconds
	// on one monotonic clock shared by all clients. Return is ignored when
	// Outcome is Unknown. Invariant otherwise: Call <= Return.
	Call, Return int64
	Outcome      Outcome
}

var (
	// ErrInvalidHistory is returned when the recorded history breaks the
	// KVOp contract (unknown kind or outcome, Return before Call, ...).
	ErrInvalidHistory = errors.New("check: invalid history")
	// ErrInvalidArgument is returned for an invalid option.
	ErrInvalidArgument = errors.New("check: invalid argument")
	// ErrCheckTimeout is returned when porcupine ran out of time before it
	// reached a verdict. It is not a pass: the history may or may not be
	// linearizable. Shorten the history or raise the timeout.
	ErrCheckTimeout = errors.New("check: linearizability check timed out without a verdict")
)

// LinearizableTimeoutDefault is the search limit when none is given.
const LinearizableTimeoutDefault = time.Minute

// LinearizableOptions configures CheckLinearizableWithOptions. The zero
// value is the default.
type LinearizableOptions struct {
	// Timeout bounds each of porcupine's searches in wall-clock time (a
	// failing history is searched twice: once for the verdict, once more to
	// name the failing keys). It is a resource limit, never an assertion:
	// running out of it before the verdict yields ErrCheckTimeout. Zero
	// means LinearizableTimeoutDefault; negative is invalid. Linearizability checking is NP-complete, so the
	// time grows quickly with the number of operations that overlap on one
	// key; ambiguous writes, which overlap everything after their call,
	// cost the most.
	Timeout time.Duration
	// VisualizationPath, if not empty, is the file that receives porcupine's
	// HTML visualization of the history when it is not linearizable.
	VisualizationPath string
}

// CheckLinearizable checks that a history of single-key operations is
// linearizable, with porcupine's search bounded by timeout (0: the
// default). See CheckLinearizableWithOptions.
func CheckLinearizable(ops []KVOp, timeout time.Duration) (ok bool, info string, err error) {
	return CheckLinearizableWithOptions(ops, LinearizableOptions{Timeout: timeout})
}

// CheckLinearizableWithOptions checks that a history of single-key get, put
// and del operations is linearizable against a map from key to value that
// starts empty.
//
// The model is partitioned by key, since operations on different keys
// commute, and porcupine checks each key on its own. Outcomes are mapped as
// follows:
//
//   - OK: the operation as recorded.
//   - Failed: dropped; it did not happen.
//   - Unknown put or del: kept, with its Return moved to +infinity
//     (math.MaxInt64), as porcupine's documentation recommends: it may take
//     effect at any point after its call, including after every other
//     operation, which is the same as never.
//   - Unknown get: dropped; a read with no result constrains nothing.
//
// Results: (true, summary, nil) if linearizable; (false, description, nil)
// if not, the description naming the keys without a linearization and the
// visualization file if one was asked for (if the explaining search runs
// out of time, or the file cannot be written, the description says so: the
// verdict stands either way); (false, ..., err) if there is no verdict, err
// wrapping ErrInvalidHistory, ErrInvalidArgument or ErrCheckTimeout.
func CheckLinearizableWithOptions(ops []KVOp, opts LinearizableOptions) (ok bool, info string, err error) {
	timeout := opts.Timeout
	switch {
	case timeout < 0:
		return false, "", fmt.Errorf("%w: negative timeout %v", ErrInvalidArgument, timeout)
	case timeout == 0:
		timeout = LinearizableTimeoutDefault
	}
	history, dropped, err := porcupineHistory(ops)
	if err != nil {
		return false, "", err
	}
	keys := keysOf(history)
	model := kvModel()

	// First the plain search: it stops at the first illegal key and keeps
	// no partial linearizations, so a passing history costs the least.
	result := porcupine.CheckOperationsTimeout(model, history, timeout)
	summary := fmt.Sprintf("%d operations on %d keys (%d failed operations and unknown-outcome gets dropped)",
		len(history), len(keys), dropped)
	switch result {
	case porcupine.Ok:
		return true, "linearizable: " + summary, nil
	case porcupine.Unknown:
		return false, "no verdict: " + summary, fmt.Errorf("%w after %v (%s)", ErrCheckTimeout, timeout, summary)
	case porcupine.Illegal:
	default:
		panic(fmt.Sprintf("check: porcupine returned unexpected result %q", result))
	}

	// Then, only for a failure, the verbose search, which checks every key
	// to the end and keeps the partial linearizations that name the failing
	// keys and feed the visualization. The verdict is already known; this
	// search only explains it, under its own timeout.
	var b strings.Builder
	fmt.Fprintf(&b, "not linearizable: %s", summary)
	diagnosis, linInfo := porcupine.CheckOperationsVerbose(model, history, timeout)
	switch diagnosis {
	case porcupine.Illegal:
	case porcupine.Unknown:
		fmt.Fprintf(&b, "; finding the failing keys ran out of time (%v)", timeout)
		return false, b.String(), nil
	default:
		panic(fmt.Sprintf("check: porcupine found the history illegal, then %q on the same input", diagnosis))
	}
	fmt.Fprintf(&b, "; keys without a full linearization: %s", strings.Join(unlinearizedKeys(keys, history, linInfo), ", "))
	if opts.VisualizationPath != "" {
		if err := porcupine.VisualizePath(model, linInfo, opts.VisualizationPath); err != nil {
			fmt.Fprintf(&b, "; writing the visualization failed: %v", err)
		} else {
			fmt.Fprintf(&b, "; visualization: %s", opts.VisualizationPath)
		}
	}
	return false, b.String(), nil
}

// kvInput is the input of one operation in porcupine's history.
type kvInput struct {
	kind  string
	key   string
	value string // OpPut only
}

// kvOutput is the output of one operation in porcupine's history.
type kvOutput struct {
	outcome Outcome // OK or Unknown; failed operations are dropped
	found   bool    // OpGet only
	value   string  // OpGet only, when found
}

// kvState is the model's state for one key (the model is partitioned by
// key). Comparable, so porcupine's default == serves as Equal.
type kvState struct {
	present bool
	value   string
}

// porcupineHistory validates ops and converts those that carry information
// into porcupine operations. It returns how many it dropped.
func porcupineHistory(ops []KVOp) (history []porcupine.Operation, dropped int, err error) {
	history = make([]porcupine.Operation, 0, len(ops))
	for i, op := range ops {
		if err := validateKVOp(op); err != nil {
			return nil, 0, fmt.Errorf("%w: op %d %+v: %s", ErrInvalidHistory, i, op, err)
		}
		ret := op.Return
		switch {
		case op.Outcome == Failed:
			dropped++
			continue
		case op.Outcome == Unknown && op.Kind == OpGet:
			dropped++
			continue
		case op.Outcome == Unknown:
			ret = math.MaxInt64
		}
		history = append(history, porcupine.Operation{
			ClientId: op.ClientID,
			Input:    kvInput{kind: op.Kind, key: op.Key, value: op.Value},
			Call:     op.Call,
			Output:   kvOutput{outcome: op.Outcome, found: op.Found, value: op.Value},
			Return:   ret,
		})
	}
	return history, dropped, nil
}

func validateKVOp(op KVOp) error {
	switch {
	case op.Kind != OpGet && op.Kind != OpPut && op.Kind != OpDel:
		return fmt.Errorf("kind %q is not %q, %q or %q", op.Kind, OpGet, OpPut, OpDel)
	case op.Outcome != OK && op.Outcome != Failed && op.Outcome != Unknown:
		return fmt.Errorf("outcome %v is not set", op.Outcome)
	case op.ClientID < 0:
		return fmt.Errorf("negative client ID")
	case op.Outcome != Unknown && op.Return < op.Call:
		return fmt.Errorf("returns at %d before its call at %d", op.Return, op.Call)
	case op.Kind == OpGet && op.Outcome == OK && !op.Found && op.Value != "":
		return fmt.Errorf("get found nothing but has a value")
	}
	return nil
}

func keysOf(history []porcupine.Operation) []string {
	seen := make(map[string]bool)
	for _, op := range history {
		seen[op.Input.(kvInput).key] = true
	}
	return sortedKeys(seen)
}

// partitionByKey splits a history into one partition per key, in key order.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := make(map[string][]porcupine.Operation)
	for _, op := range history {
		key := op.Input.(kvInput).key
		byKey[key] = append(byKey[key], op)
	}
	partitions := make([][]porcupine.Operation, 0, len(byKey))
	for _, key := range sortedKeys(byKey) {
		partitions = append(partitions, byKey[key])
	}
	return partitions
}

// unlinearizedKeys returns the keys whose longest partial linearization
// leaves out some of the key's operations: the keys that are not
// linearizable, or whose check was cut short by the timeout. It relies on
// partitionByKey returning partitions in key order.
func unlinearizedKeys(keys []string, history []porcupine.Operation, info porcupine.LinearizationInfo) []string {
	counts := make(map[string]int)
	for _, op := range history {
		counts[op.Input.(kvInput).key]++
	}
	partials := info.PartialLinearizations()
	var failed []string
	for p, key := range keys {
		longest := 0
		if p < len(partials) {
			for _, l := range partials[p] {
				longest = max(longest, len(l))
			}
		}
		if longest < counts[key] {
			failed = append(failed, fmt.Sprintf("%q", key))
		}
	}
	return failed
}

// kvModel is the sequential specification of one key.
func kvModel() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByKey,
		Init:      func() interface{} { return kvState{} },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			st, in, out := state.(kvState), input.(kvInput), output.(kvOutput)
			switch in.kind {
			case OpGet:
				return out.found == st.present && out.value == st.value, st
			case OpPut:
				return true, kvState{present: true, value: in.value}
			case OpDel:
				return true, kvState{}
			default:
				panic(fmt.Sprintf("check: unvalidated operation kind %q", in.kind))
			}
		},
		Hash: func(state interface{}) uint64 {
			st := state.(kvState)
			h := fnv.New64a()
			if st.present {
				h.Write([]byte{1})
			}
			h.Write([]byte(st.value))
			return h.Sum64()
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(kvInput), output.(kvOutput)
			var s string
			switch in.kind {
			case OpGet:
				s = fmt.Sprintf("get(%q) -> not found", in.key)
				if out.found {
					s = fmt.Sprintf("get(%q) -> %q", in.key, out.value)
				}
			case OpPut:
				s = fmt.Sprintf("put(%q, %q)", in.key, in.value)
			default:
				s = fmt.Sprintf("del(%q)", in.key)
			}
			if out.outcome == Unknown {
				s += " (outcome unknown)"
			}
			return s
		},
		DescribeState: func(state interface{}) string {
			st := state.(kvState)
			if !st.present {
				return "<absent>"
			}
			return fmt.Sprintf("%q", st.value)
		},
	}
}
