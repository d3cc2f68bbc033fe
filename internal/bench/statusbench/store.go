package statusbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/txnstatus"
	"github.com/cockroachdb/pebble/v2"
)

// StoreConfig is one store setting of the size and latency experiments.
type StoreConfig struct {
	// Name labels the setting in tables ("tickets+BF", ...).
	Name string
	// Encoding is "v1" or "tickets".
	Encoding string
	// FilterBitsPerKey is storage.Options.StatusFilterBitsPerKey: 0 the
	// store's default, negative no filter.
	FilterBitsPerKey int
	// BlockBytes is storage.Options.BlockBytes (0: Pebble's 4 KiB).
	BlockBytes int
}

// The record's columns, as Pebble settings: tx1 is v1 and tx2 tickets,
// both without a filter (Pebble writes none unless asked); BF is the
// status-table Bloom filter at 20 bits per key (the record's
// bloom_filter_fp_chance 0.0001); B16 and B64 are data blocks of 16 and 64
// KiB (its chunk_length_kb). The record's index interval of 1 has no
// Pebble equivalent beyond the index block size, which follows the data
// block size.
var RecordStoreConfigs = []StoreConfig{
	{Name: "v1", Encoding: "v1", FilterBitsPerKey: -1},
	{Name: "v1+BF", Encoding: "v1", FilterBitsPerKey: storage.DefaultStatusFilterBitsPerKey},
	{Name: "tickets", Encoding: "tickets", FilterBitsPerKey: -1},
	{Name: "tickets+BF", Encoding: "tickets", FilterBitsPerKey: storage.DefaultStatusFilterBitsPerKey},
	{Name: "tickets+BF+B16", Encoding: "tickets", FilterBitsPerKey: storage.DefaultStatusFilterBitsPerKey, BlockBytes: 16 << 10},
	{Name: "tickets+BF+B64", Encoding: "tickets", FilterBitsPerKey: storage.DefaultStatusFilterBitsPerKey, BlockBytes: 64 << 10},
}

// Store is a storage engine holding synthetic status records.
type Store struct {
	Config StoreConfig
	Engine *storage.Engine
	Enc    txnstatus.Encoding
	Txns   []Txn
	Load   time.Duration
}

// LoadStore writes the records of txns into a new engine in dir through
// cfg's encoding (plain keys under keys.StatusPrefix, as a node stores
// them), in batches of 10,000 without fsync. With tables == 0 it then
// compacts the whole store into one level (the size experiment's steady
// state); with tables > 0 it flushes after each 1/tables of the records,
// with automatic compactions off, leaving that many L0 tables: the same
// shape for every setting, and the shape where filters matter (a lookup
// consults every table whose key range covers its key). cacheBytes is
// the block cache (small for the latency experiment).
func LoadStore(ctx context.Context, dir string, cfg StoreConfig, txns []Txn, cacheBytes int64, tables int) (*Store, error) {
	enc, err := Encoding(cfg.Encoding)
	if err != nil {
		return nil, err
	}
	e, err := storage.Open(dir, storage.Options{NoSync: true, CacheBytes: cacheBytes, MemTableBytes: 64 << 20,
		StatusFilterBitsPerKey: cfg.FilterBitsPerKey, BlockBytes: cfg.BlockBytes, DisableAutomaticCompactions: tables > 0})
	if err != nil {
		return nil, err
	}
	s := &Store{Config: cfg, Engine: e, Enc: enc, Txns: txns}
	start := time.Now()
	const batchKeys = 10_000
	// With tables > 0, the store is flushed after each 1/tables of the
	// records (in start_ts order, as they come), so that it holds that
	// many L0 tables.
	chunk := len(txns)
	if tables > 0 {
		chunk = (len(txns) + tables - 1) / tables
	}
	for i := 0; i < len(txns); i += batchKeys {
		if tables > 0 && i > 0 && i%chunk < batchKeys {
			if err := e.DB().Flush(); err != nil {
				_ = e.Close()
				return nil, err
			}
		}
		if err := ctx.Err(); err != nil {
			_ = e.Close()
			return nil, err
		}
		b := e.NewWriteBatch()
		for _, t := range txns[i:min(i+batchKeys, len(txns))] {
			v, err := enc.EncodeValue(t.Start, t.Commit)
			if err == nil {
				err = mvcc.PutPlain(b, keys.StatusKey(enc.Key(t.Start)), v)
			}
			if err != nil {
				b.Close()
				_ = e.Close()
				return nil, err
			}
		}
		err := b.Commit(false)
		b.Close()
		if err != nil {
			_ = e.Close()
			return nil, err
		}
	}
	db := e.DB()
	if err := db.Flush(); err != nil {
		_ = e.Close()
		return nil, err
	}
	if tables == 0 {
		if err := db.Compact(ctx, []byte{0}, []byte{0xff, 0xff}, false); err != nil {
			_ = e.Close()
			return nil, err
		}
	}
	s.Load = time.Since(start)
	return s, nil
}

// Close closes the engine.
func (s *Store) Close() error { return s.Engine.Close() }

// Sizes are a store's tables after the load.
type Sizes struct {
	Tables                              int
	TotalBytes                          uint64 // the table files
	DataBytes, IndexBytes, FilterBytes  uint64
	RawKeyBytes, RawValueBytes, Entries uint64
}

// Sizes reads the tables' properties.
func (s *Store) Sizes() (Sizes, error) {
	levels, err := s.Engine.DB().SSTables(pebble.WithProperties())
	if err != nil {
		return Sizes{}, err
	}
	var z Sizes
	for _, lv := range levels {
		for _, t := range lv {
			z.Tables++
			z.TotalBytes += t.Size
			if p := t.Properties; p != nil {
				z.DataBytes += p.DataSize
				z.IndexBytes += p.IndexSize
				z.FilterBytes += p.FilterSize
				z.RawKeyBytes += p.RawKeySize
				z.RawValueBytes += p.RawValueSize
				z.Entries += p.NumEntries
			}
		}
	}
	return z, nil
}

// SizeRow is one row of the size experiment.
type SizeRow struct {
	Config StoreConfig
	Txns   int
	Sizes  Sizes
	Load   time.Duration
}

// Size loads a store per config and count in a fresh directory under dir
// (removed after), and measures it. Counts above countMax are refused.
func Size(ctx context.Context, dir string, configs []StoreConfig, counts []int, seed uint64, progress func(string)) ([]SizeRow, error) {
	var rows []SizeRow
	for _, n := range counts {
		txns := SyntheticTxns(n, seed)
		for _, cfg := range configs {
			d, err := os.MkdirTemp(dir, "status-size-")
			if err != nil {
				return nil, err
			}
			progress(fmt.Sprintf("size: %s, %d transactions...", cfg.Name, n))
			s, err := LoadStore(ctx, d, cfg, txns, 8<<20, 0)
			if err != nil {
				_ = os.RemoveAll(d)
				return nil, err
			}
			z, err := s.Sizes()
			load := s.Load
			cerr := s.Close()
			_ = os.RemoveAll(d)
			if err == nil {
				err = cerr
			}
			if err != nil {
				return nil, err
			}
			rows = append(rows, SizeRow{Config: cfg, Txns: n, Sizes: z, Load: load})
		}
	}
	return rows, nil
}

// SizeTable formats the size rows.
func SizeTable(rows []SizeRow) Table {
	t := Table{Title: "status table size after a full compaction (records written straight into one store)",
		Header: []string{"setting", "txns", "tables", "total bytes", "bytes/txn", "data bytes", "index bytes", "filter bytes", "raw key B/txn", "raw value B/txn", "load s"}}
	for _, r := range rows {
		z, n := r.Sizes, float64(r.Txns)
		t.Rows = append(t.Rows, []string{r.Config.Name, fmt.Sprint(r.Txns), fmt.Sprint(z.Tables), fmt.Sprint(z.TotalBytes),
			fmt.Sprintf("%.2f", float64(z.TotalBytes)/n), fmt.Sprint(z.DataBytes), fmt.Sprint(z.IndexBytes), fmt.Sprint(z.FilterBytes),
			fmt.Sprintf("%.2f", float64(z.RawKeyBytes)/n), fmt.Sprintf("%.2f", float64(z.RawValueBytes)/n), fmt.Sprintf("%.1f", r.Load.Seconds())})
	}
	return t
}

// LatencyOptions configure the read-latency experiment.
type LatencyOptions struct {
	Txns        int           // records per store (default 1,000,000)
	Concurrency []int         // readers (default 100, 250)
	HitRates    []int         // percent of lookups that find a record (default 100, 50)
	Duration    time.Duration // per cell (default 5s)
	LookupsMax  int64         // per cell (default 2,000,000)
	CacheBytes  int64         // block cache (default 4 MiB)
	Tables      int           // L0 tables of each store (default 8)
	Seed        uint64
	Configs     []StoreConfig // default RecordStoreConfigs
	Dir         string        // parent of the stores ("" the system's temporary directory)
}

func (o *LatencyOptions) ensureDefaults() {
	if o.Txns == 0 {
		o.Txns = 1_000_000
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{100, 250}
	}
	if len(o.HitRates) == 0 {
		o.HitRates = []int{100, 50}
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.LookupsMax == 0 {
		o.LookupsMax = 2_000_000
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 4 << 20
	}
	if o.Tables == 0 {
		o.Tables = 8
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if len(o.Configs) == 0 {
		o.Configs = RecordStoreConfigs
	}
}

// LatencyCell is one measured cell: a setting at a concurrency and hit rate.
type LatencyCell struct {
	Config        string
	Concurrency   int
	HitRate       int
	Lookups       int64
	Found         int64
	Tables        string // tables per level of the store, L0 first
	P50, P95, P99 time.Duration
}

// Latency loads one store per setting and, for each concurrency and hit
// rate, runs that many readers, each looking up status records one at a
// time (a hit: a written start_ts; a miss: start_ts+1, never written) for
// the duration or the count.
func Latency(ctx context.Context, o LatencyOptions, progress func(string)) ([]LatencyCell, error) {
	o.ensureDefaults()
	txns := SyntheticTxns(o.Txns, o.Seed)
	var out []LatencyCell
	for _, cfg := range o.Configs {
		d, err := os.MkdirTemp(o.Dir, "status-latency-")
		if err != nil {
			return nil, err
		}
		progress(fmt.Sprintf("latency: loading %s with %d transactions...", cfg.Name, o.Txns))
		s, err := LoadStore(ctx, filepath.Join(d, "store"), cfg, txns, o.CacheBytes, o.Tables)
		if err != nil {
			_ = os.RemoveAll(d)
			return nil, err
		}
		for _, hit := range o.HitRates {
			for _, c := range o.Concurrency {
				progress(fmt.Sprintf("latency: %s, concurrency %d, hit rate %d%%...", cfg.Name, c, hit))
				cell, err := s.lookups(ctx, c, hit, o)
				cell.Tables = s.tables()
				if err != nil {
					_ = s.Close()
					_ = os.RemoveAll(d)
					return nil, err
				}
				out = append(out, cell)
			}
		}
		err = s.Close()
		_ = os.RemoveAll(d)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) lookups(ctx context.Context, concurrency, hitRate int, o LatencyOptions) (LatencyCell, error) {
	cell := LatencyCell{Config: s.Config.Name, Concurrency: concurrency, HitRate: hitRate}
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var (
		count, found atomic.Int64
		mu           sync.Mutex
		all          []time.Duration
		firstErr     error
		wg           sync.WaitGroup
	)
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed, uint64(w)+1))
			var mine []time.Duration
			for ctx.Err() == nil && count.Add(1) <= o.LookupsMax {
				t := s.Txns[rng.IntN(len(s.Txns))]
				ts := t.Start
				if rng.IntN(100) >= hitRate {
					ts++ // never a start (SyntheticTxns)
				}
				k := keys.StatusKey(s.Enc.Key(ts))
				t0 := time.Now()
				_, ok, err := mvcc.GetPlain(s.Engine, k)
				mine = append(mine, time.Since(t0))
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				if ok {
					found.Add(1)
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return cell, firstErr
	}
	cell.Lookups, cell.Found = int64(len(all)), found.Load()
	cell.P50, cell.P95, cell.P99 = percentiles(all)
	return cell, nil
}

// LatencyTables formats the cells as the record's tables: one per hit
// rate, a row per concurrency and percentile, a column per setting.
func LatencyTables(cells []LatencyCell, configs []StoreConfig, concurrency, hitRates []int) []Table {
	var out []Table
	for _, hit := range hitRates {
		t := Table{Title: fmt.Sprintf("status lookup latency, ms, hit rate %d%%", hit), Header: []string{"concurrency", "metric"}}
		for _, c := range configs {
			t.Header = append(t.Header, c.Name)
		}
		for _, c := range concurrency {
			for _, m := range []string{"p50", "p95", "p99"} {
				row := []string{fmt.Sprint(c), m}
				for _, cfg := range configs {
					v := "-"
					for _, x := range cells {
						if x.Config == cfg.Name && x.Concurrency == c && x.HitRate == hit {
							v = ms(map[string]time.Duration{"p50": x.P50, "p95": x.P95, "p99": x.P99}[m])
						}
					}
					row = append(row, v)
				}
				t.Rows = append(t.Rows, row)
			}
		}
		out = append(out, t)
	}
	shape := Table{Title: "the stores read (tables per level, as the load left them)", Header: []string{"setting", "tables"}}
	for _, cfg := range configs {
		for _, x := range cells {
			if x.Config == cfg.Name {
				shape.Rows = append(shape.Rows, []string{cfg.Name, x.Tables})
				break
			}
		}
	}
	return append(out, shape)
}

// tables describes the store's tables per level ("L0:3 L5:1 L6:4").
func (s *Store) tables() string {
	levels, err := s.Engine.DB().SSTables()
	if err != nil {
		return err.Error()
	}
	var out []string
	for i, lv := range levels {
		if len(lv) > 0 {
			out = append(out, fmt.Sprintf("L%d:%d", i, len(lv)))
		}
	}
	return strings.Join(out, " ")
}
