package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/spf13/cobra"
)

// kvOutput is kv's --output.
var kvOutput string

// ScanPageKeys is how many keys `kv scan --limit 0` reads per request.
const ScanPageKeys = 1000

// ScanLimitDefault is kv scan's default --limit.
const ScanLimitDefault = 1000

func init() {
	kv := &cobra.Command{Use: "kv", Short: "Single-key reads and writes outside transactions",
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := rootCmd.PersistentPreRunE(cmd, args); err != nil {
				return err
			}
			return checkOutput(kvOutput)
		}}
	addConnFlags(kv)
	addOutputFlag(kv, &kvOutput)

	get := &cobra.Command{Use: "get KEY", Args: cobra.ExactArgs(1),
		Short: "Print the value of KEY (exit status 3 if it does not exist)",
		RunE: withDBArgs(func(ctx context.Context, db *client.DB, args []string) error {
			k := []byte(args[0])
			v, ok, err := db.Get(ctx, k)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("key %s: %w", formatBytes(outputTable, k), errNotFound)
			}
			switch kvOutput {
			case outputJSON:
				return printJSON(map[string]string{"key": b64(k), "value": b64(v)})
			case outputHex:
				fmt.Println(formatBytes(outputHex, v))
			default:
				os.Stdout.Write(append(v, '\n'))
			}
			return nil
		})}

	var valueFile string
	put := &cobra.Command{Use: "put KEY [VALUE | -]", Args: cobra.RangeArgs(1, 2),
		Short: "Write a value at KEY and print OK",
		Long: fmt.Sprintf(`Write a value at KEY and print OK. The value is VALUE; with - in its place, the
whole of standard input; with --value-file FILE, that file's contents. Values
may be up to %d bytes (4 MiB); command-line arguments are limited to 128 KiB by
the operating system, so pass large values through - or --value-file. An empty
value is written with ''.`, keys.ValueBytesMax),
		Example: `  canopy kv put greeting hello
  canopy kv put 'key with spaces' 'value with spaces'
  canopy kv put photo - < photo.jpg
  canopy kv put photo --value-file photo.jpg`,
		RunE: withDBArgs(func(ctx context.Context, db *client.DB, args []string) error {
			v, err := putValue(args, valueFile, os.Stdin)
			if err != nil {
				return err
			}
			if err := db.Put(ctx, []byte(args[0]), v); err != nil {
				return err
			}
			if kvOutput == outputJSON {
				return printJSON(map[string]any{"ok": true, "value_bytes": len(v)})
			}
			fmt.Println("OK")
			return nil
		})}
	put.Flags().StringVar(&valueFile, "value-file", "", "read the value from this file")

	del := &cobra.Command{Use: "del KEY", Args: cobra.ExactArgs(1),
		Short: "Delete KEY and print how many keys were deleted (1 or 0)",
		RunE: withDBArgs(func(ctx context.Context, db *client.DB, args []string) error {
			n, err := deleteKey(ctx, db, []byte(args[0]))
			if err != nil {
				return err
			}
			if kvOutput == outputJSON {
				return printJSON(map[string]int{"deleted": n})
			}
			fmt.Println(n)
			return nil
		})}

	var limit int
	var after string
	scan := &cobra.Command{Use: "scan [START [END]] | scan --after KEY [END]", Args: cobra.MaximumNArgs(2),
		Short: "Print the keys in [START, END) with their values, in key order",
		Long: fmt.Sprintf(`Print the keys in [START, END) with their values, in key order: all keys
without START and END, from START to the end without END.

It prints at most --limit keys (default %d). When more keys follow, it says so
on standard error with the command that continues after the last key printed
(--after KEY starts after KEY instead of at START); in json output, "more" is
true and "after" holds that key. --limit 0 prints every key.

Keys are read in pages of %d: each page is read at one timestamp, a scan of
more keys is not a single snapshot (use canopy txn "scan ..." for one).`, ScanLimitDefault, ScanPageKeys),
		Example: `  canopy kv scan
  canopy kv scan user/ user0 --limit 10
  canopy kv scan --after user/0042 user0 --limit 10`,
		RunE: withDBArgs(func(ctx context.Context, db *client.DB, args []string) error {
			if limit < 0 {
				return usageErrorf("--limit %d: want 0 (no limit) or more", limit)
			}
			var start, end []byte
			if len(args) > 0 {
				start = []byte(args[0])
			}
			if len(args) > 1 {
				end = []byte(args[1])
			}
			if after != "" {
				// --after replaces START: the one argument is END.
				if len(args) > 1 {
					return usageErrorf("--after KEY takes the place of START: give at most END")
				}
				start, end = append([]byte(after), 0), nil
				if len(args) == 1 {
					end = []byte(args[0])
				}
			}
			kvs, more, err := scanKeys(ctx, db, start, end, limit)
			if err != nil {
				return err
			}
			return printScan(os.Stdout, os.Stderr, kvs, more, end, limit)
		})}
	scan.Flags().IntVar(&limit, "limit", ScanLimitDefault, "most keys to print (0: all, read in pages)")
	scan.Flags().StringVar(&after, "after", "", "start after this key (to continue a scan that stopped at its --limit)")
	kv.AddCommand(get, put, del, scan)
	rootCmd.AddCommand(kv)

	split := &cobra.Command{Use: "split KEY", Args: cobra.ExactArgs(1), Short: "Split the range containing KEY at KEY",
		RunE: withDBArgs(func(ctx context.Context, db *client.DB, args []string) error {
			if err := db.Split(ctx, []byte(args[0])); err != nil {
				return err
			}
			fmt.Printf("split at %s\n", formatBytes(outputTable, []byte(args[0])))
			return nil
		})}
	addConnFlags(split)
	adminCmd.AddCommand(split)
}

// withDBArgs is withDB for a function that needs the arguments.
func withDBArgs(f func(ctx context.Context, db *client.DB, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return withDB(func(ctx context.Context, db *client.DB) error { return f(ctx, db, args) })(cmd, args)
	}
}

// putValue returns the value of `kv put`: args[1], standard input for
// "-", or the --value-file's contents. It refuses more than
// keys.ValueBytesMax bytes before sending anything.
func putValue(args []string, valueFile string, stdin io.Reader) ([]byte, error) {
	var r io.Reader
	switch {
	case len(args) == 2 && valueFile != "":
		return nil, usageErrorf("VALUE and --value-file: give one of them")
	case len(args) == 1 && valueFile == "":
		return nil, usageErrorf("no value: give VALUE, - (standard input) or --value-file FILE")
	case valueFile != "":
		f, err := os.Open(valueFile)
		if err != nil {
			return nil, fmt.Errorf("--value-file: %w", err)
		}
		defer f.Close()
		r = f
	case args[1] == "-":
		r = stdin
	default:
		return []byte(args[1]), nil
	}
	v, err := io.ReadAll(io.LimitReader(r, keys.ValueBytesMax+1))
	if err != nil {
		return nil, fmt.Errorf("reading the value: %w", err)
	}
	if len(v) > keys.ValueBytesMax {
		return nil, fmt.Errorf("%w: the value is over keys.ValueBytesMax (%d bytes)", client.ErrInvalidArgument, keys.ValueBytesMax)
	}
	return v, nil
}

// deleteKey deletes k in a transaction that first reads it, so that it
// can say whether there was a key to delete (like etcdctl del).
func deleteKey(ctx context.Context, db *client.DB, k []byte) (int, error) {
	n := 0
	err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		_, ok, err := txn.Get(ctx, k)
		if err != nil || !ok {
			n = 0
			return err
		}
		n = 1
		return txn.Delete(ctx, k)
	})
	return n, err
}

// scanKeys returns up to limit keys of [start, end) (all of them for limit
// 0) and whether more follow. It reads in pages of at most ScanPageKeys
// keys, and one key past the limit to know whether more follow.
func scanKeys(ctx context.Context, db *client.DB, start, end []byte, limit int) ([]client.KeyValue, bool, error) {
	var out []client.KeyValue
	for {
		n := ScanPageKeys
		if limit > 0 {
			n = min(n, limit-len(out)+1)
		}
		kvs, err := db.Scan(ctx, start, end, n)
		if err != nil {
			return nil, false, err
		}
		out = append(out, kvs...)
		if limit > 0 && len(out) > limit {
			return out[:limit], true, nil
		}
		if len(kvs) < n {
			return out, false, nil
		}
		start = append(append([]byte(nil), kvs[len(kvs)-1].Key...), 0)
	}
}

// printScan prints a scan's keys in kvOutput's format to w and, when the
// scan stopped at its limit, how to continue to hint.
func printScan(w, hint io.Writer, kvs []client.KeyValue, more bool, end []byte, limit int) error {
	var last []byte
	if len(kvs) > 0 {
		last = kvs[len(kvs)-1].Key
	}
	if kvOutput == outputJSON {
		type kvJSON struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		}
		out := struct {
			KVs   []kvJSON `json:"kvs"`
			Count int      `json:"count"`
			More  bool     `json:"more"`
			After string   `json:"after,omitempty"`
		}{KVs: []kvJSON{}, Count: len(kvs), More: more}
		for _, kv := range kvs {
			out.KVs = append(out.KVs, kvJSON{b64(kv.Key), b64(kv.Value)})
		}
		if more {
			out.After = b64(last)
		}
		return printJSONTo(w, out)
	}
	for _, kv := range kvs {
		fmt.Fprintf(w, "%s\t%s\n", formatBytes(kvOutput, kv.Key), formatBytes(kvOutput, kv.Value))
	}
	if more {
		cont := "canopy kv scan --after " + shellQuote(last)
		if end != nil {
			cont += " " + shellQuote(end)
		}
		fmt.Fprintf(hint, "stopped at --limit %d: more keys follow; continue with:\n  %s --limit %d\n", limit, cont, limit)
	}
	return nil
}

func printJSON(v any) error { return printJSONTo(os.Stdout, v) }

func printJSONTo(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}
