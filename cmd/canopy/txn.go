package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

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

func parseTxnOp(s string) (txnOp, error) {
	f := strings.Fields(s)
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
		op.limit = 1000
		if len(f) > 3 {
			n, err := strconv.Atoi(f[3])
			if err != nil || n <= 0 {
				return txnOp{}, fmt.Errorf("scan limit %q is not a positive number", f[3])
			}
			op.limit = n
		}
	default:
		return txnOp{}, fmt.Errorf("operation %q: want one of: get KEY | put KEY VALUE | del KEY | scan START [END [LIMIT]]", s)
	}
	return op, nil
}

func init() {
	var snapshot bool
	cmd := &cobra.Command{
		Use:   "txn OPERATION...",
		Short: "Run operations in one transaction (serializable unless --snapshot-isolation)",
		Example: `  canopy txn "get alice" "put alice 90" "put bob 110"
  canopy txn "scan a z 10"`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ops []txnOp
			for _, a := range args {
				op, err := parseTxnOp(a)
				if err != nil {
					return fmt.Errorf("%w: %v", client.ErrInvalidArgument, err)
				}
				ops = append(ops, op)
			}
			var opts []client.TxnOption
			if snapshot {
				opts = append(opts, client.WithIsolation(client.SnapshotIsolation))
			}
			return withDB(func(ctx context.Context, db *client.DB) error {
				var out []string
				err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
					out = out[:0] // the closure may run again after a conflict
					for _, op := range ops {
						switch op.verb {
						case "get":
							v, ok, err := txn.Get(ctx, []byte(op.key))
							if err != nil {
								return err
							}
							if ok {
								out = append(out, fmt.Sprintf("%s\t%s", op.key, v))
							} else {
								out = append(out, fmt.Sprintf("%s\t(not found)", op.key))
							}
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
								out = append(out, fmt.Sprintf("%s\t%s", kv.Key, kv.Value))
							}
						}
					}
					return nil
				}, opts...)
				if err != nil {
					return err
				}
				for _, l := range out {
					fmt.Println(l)
				}
				fmt.Printf("committed (%d operations)\n", len(ops))
				return nil
			})(cmd, args)
		},
	}
	cmd.Flags().StringVar(&hosts, "host", "127.0.0.1:26257", "comma-separated node addresses")
	cmd.Flags().BoolVar(&snapshot, "snapshot-isolation", false, "run under snapshot isolation instead of serializable")
	rootCmd.AddCommand(cmd)
}
