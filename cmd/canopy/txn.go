package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"

	"github.com/canopy-db/canopy/client"
	"github.com/spf13/cobra"
)

// txnOp is one operation of `canopy txn`.
type txnOp struct {
	verb       string
	key, value string
	end        string
	limit      int
}

// TxnScanLimitDefault is the LIMIT of a txn scan that gives none.
const TxnScanLimitDefault = 1000

const txnGrammar = `Each OPERATION is one command-line argument (quote it for the shell), a verb
and its operands, separated by spaces:

  get KEY                    print KEY and its value, or (not found)
  put KEY VALUE              write VALUE at KEY
  del KEY                    delete KEY
  scan START [END [LIMIT]]   print the keys in [START, END), at most LIMIT
                             (default 1000); END '' means to the end

An operand with spaces, quotes or nothing in it is quoted inside the
operation: 'single quotes' take everything literally up to the next ';
"double quotes" read Go escapes (\n, \t, \", \\, \xHH); '' or "" is the
empty string. The verb is case-insensitive.

All operations run in one transaction: its reads see one snapshot and its
writes commit together or not at all. It is retried from the start after a
conflict; the output is that of the attempt that committed. Exit status 6 if
it gave up after its attempts, 5 if its commit's outcome is unknown.`

// splitOperands splits an operation into its words, honouring quotes.
func splitOperands(s string) ([]string, error) {
	var out []string
	i := 0
	for {
		for i < len(s) && unicode.IsSpace(rune(s[i])) {
			i++
		}
		if i == len(s) {
			return out, nil
		}
		var w strings.Builder
		for i < len(s) && !unicode.IsSpace(rune(s[i])) {
			switch c := s[i]; c {
			case '\'':
				j := strings.IndexByte(s[i+1:], '\'')
				if j < 0 {
					return nil, fmt.Errorf("unterminated ' in %q", s)
				}
				w.WriteString(s[i+1 : i+1+j])
				i += j + 2
			case '"':
				q, err := strconv.QuotedPrefix(s[i:])
				if err != nil {
					return nil, fmt.Errorf("bad \"...\" string at %q: want a closing \" and Go escapes (\\n, \\\", \\\\, \\xHH)", s[i:])
				}
				u, _ := strconv.Unquote(q)
				w.WriteString(u)
				i += len(q)
			default:
				w.WriteByte(c)
				i++
			}
		}
		out = append(out, w.String())
	}
}

func parseTxnOp(s string) (txnOp, error) {
	f, err := splitOperands(s)
	if err != nil {
		return txnOp{}, err
	}
	if len(f) == 0 {
		return txnOp{}, fmt.Errorf("empty operation")
	}
	op := txnOp{verb: strings.ToLower(f[0])}
	switch {
	case op.verb == "get" && len(f) == 2, op.verb == "del" && len(f) == 2:
		op.key = f[1]
	case op.verb == "put" && len(f) == 3:
		op.key, op.value = f[1], f[2]
	case op.verb == "scan" && len(f) >= 2 && len(f) <= 4:
		op.key = f[1]
		if len(f) > 2 {
			op.end = f[2]
		}
		op.limit = TxnScanLimitDefault
		if len(f) > 3 {
			n, err := strconv.Atoi(f[3])
			if err != nil || n <= 0 {
				return txnOp{}, fmt.Errorf("scan limit %q is not a positive number", f[3])
			}
			op.limit = n
		}
	default:
		return txnOp{}, fmt.Errorf("operation %q: want one of: get KEY | put KEY VALUE | del KEY | scan START [END [LIMIT]] (see canopy txn --help)", s)
	}
	return op, nil
}

func init() {
	var snapshot bool
	var output string
	cmd := &cobra.Command{
		Use:   "txn OPERATION...",
		Short: "Run operations in one transaction (serializable unless --snapshot-isolation)",
		Long:  "Run operations in one transaction (serializable unless --snapshot-isolation).\n\n" + txnGrammar,
		Example: `  canopy txn "get alice" "put alice 90" "put bob 110"
  canopy txn "put 'my key' 'a value with spaces'" "put empty ''"
  canopy txn "put line \"a\\nb\"" "scan a z 10"`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			var ops []txnOp
			for _, a := range args {
				op, err := parseTxnOp(a)
				if err != nil {
					return usageErrorf("%v", err)
				}
				ops = append(ops, op)
			}
			var opts []client.TxnOption
			if snapshot {
				opts = append(opts, client.WithIsolation(client.SnapshotIsolation))
			}
			return withDB(func(ctx context.Context, db *client.DB) error {
				var out []txnResult
				err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
					out = out[:0] // the closure may run again after a conflict
					for _, op := range ops {
						switch op.verb {
						case "get":
							v, ok, err := txn.Get(ctx, []byte(op.key))
							if err != nil {
								return err
							}
							out = append(out, txnResult{Op: "get", Key: []byte(op.key), Value: v, Found: ok})
						case "put":
							if err := txn.Put(ctx, []byte(op.key), []byte(op.value)); err != nil {
								return err
							}
						case "del":
							if err := txn.Delete(ctx, []byte(op.key)); err != nil {
								return err
							}
						case "scan":
							var end []byte
							if op.end != "" {
								end = []byte(op.end)
							}
							kvs, err := txn.Scan(ctx, []byte(op.key), end, op.limit)
							if err != nil {
								return err
							}
							for _, kv := range kvs {
								out = append(out, txnResult{Op: "scan", Key: kv.Key, Value: kv.Value, Found: true})
							}
						}
					}
					return nil
				}, opts...)
				if err != nil {
					return err
				}
				return printTxn(output, out, len(ops))
			})(cmd, args)
		},
	}
	addConnFlags(cmd)
	addOutputFlag(cmd, &output)
	cmd.Flags().BoolVar(&snapshot, "snapshot-isolation", false, "run under snapshot isolation instead of serializable")
	rootCmd.AddCommand(cmd)
}

// txnResult is one line of txn's output: a get's answer or a key a scan
// returned.
type txnResult struct {
	Op    string
	Key   []byte
	Value []byte
	Found bool
}

func printTxn(output string, res []txnResult, ops int) error {
	if output == outputJSON {
		type resJSON struct {
			Op    string `json:"op"`
			Key   string `json:"key"`
			Value string `json:"value,omitempty"`
			Found bool   `json:"found"`
		}
		out := struct {
			Results    []resJSON `json:"results"`
			Committed  bool      `json:"committed"`
			Operations int       `json:"operations"`
		}{Results: []resJSON{}, Committed: true, Operations: ops}
		for _, r := range res {
			rj := resJSON{Op: r.Op, Key: b64(r.Key), Found: r.Found}
			if r.Found {
				rj.Value = b64(r.Value)
			}
			out.Results = append(out.Results, rj)
		}
		return printJSON(out)
	}
	for _, r := range res {
		v := "(not found)"
		if r.Found {
			v = formatBytes(output, r.Value)
		}
		fmt.Fprintf(os.Stdout, "%s\t%s\n", formatBytes(output, r.Key), v)
	}
	fmt.Printf("committed (%d operations)\n", ops)
	return nil
}
