package vlogbench

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/vlog"
	"golang.org/x/sys/unix"
)

// Config bounds a benchmark run. The zero value is the default.
type Config struct {
	// Dir is the scratch directory (a fresh subdirectory per run). Required.
	Dir string
	// BudgetBytes is the live data per run: records = BudgetBytes / value
	// size. 0 means 64 MiB.
	BudgetBytes int64
	// ValueSizesBytes for Case 1; nil means 1 KiB .. 512 KiB in powers of 2.
	ValueSizesBytes []int
	// Modes for Case 1; nil means inline, rewrite, punch, pebble.
	Modes []storage.Mode
	// UpdatesFactor: updates = factor x records (Case 1). 0 means 4.
	UpdatesFactor int
	// Case2Factors: update volumes for Case 2, in multiples of the record
	// count. nil means 1, 2, 4, 8. Case2ValueBytes: 0 means 64 KiB.
	Case2Factors    []int
	Case2ValueBytes int
	// ThresholdBytes for separation in the benchmark; 0 means 1 KiB, so
	// that every value size of Case 1 is separated and the small sizes show
	// the cost of alignment.
	ThresholdBytes int
	// RunTimeMax bounds the update phase of one run; 0 means 120 s. A run
	// that hits it reports the updates it did.
	RunTimeMax time.Duration
	// AlignedPunch adds to Case 1 a punch run with vlog.AlignLarge, the
	// proposal's record layout, labelled "punch-aligned".
	AlignedPunch bool
	// GCOverlap runs each GC point's rounds in a goroutine while updates
	// continue; the next GC point waits for the previous one (so GC lags by
	// at most one point). Figures then depend on timing; the default
	// (false) runs GC in the foreground.
	GCOverlap bool
	// SkipCase1, SkipCase2 select the cases.
	SkipCase1, SkipCase2 bool
	// Progress receives a live progress line (carriage returns); nil: none.
	Progress io.Writer
}

func (c *Config) ensureDefaults() error {
	if c.Dir == "" {
		return errors.New("vlogbench: Config.Dir is required")
	}
	if c.BudgetBytes == 0 {
		c.BudgetBytes = 64 << 20
	}
	if c.ValueSizesBytes == nil {
		for s := 1 << 10; s <= 512<<10; s *= 2 {
			c.ValueSizesBytes = append(c.ValueSizesBytes, s)
		}
	}
	if c.Modes == nil {
		c.Modes = []storage.Mode{storage.ModeInline, storage.ModeRewrite, storage.ModePunch, storage.ModePebble}
	}
	if c.UpdatesFactor == 0 {
		c.UpdatesFactor = 4
	}
	if c.Case2Factors == nil {
		c.Case2Factors = []int{1, 2, 4, 8}
	}
	if c.Case2ValueBytes == 0 {
		c.Case2ValueBytes = 64 << 10
	}
	if c.ThresholdBytes == 0 {
		c.ThresholdBytes = 1 << 10
	}
	if c.RunTimeMax == 0 {
		c.RunTimeMax = 120 * time.Second
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.BudgetBytes < 1<<20 {
		return fmt.Errorf("vlogbench: BudgetBytes %d below 1 MiB", c.BudgetBytes)
	}
	return nil
}

// Result is one run.
type Result struct {
	Case int
	Mode storage.Mode
	// Aligned: the run used vlog.AlignLarge.
	Aligned    bool
	ValueBytes int
	Records    int
	Updates    int
	// UserBytes: key + value bytes of the updates.
	UserBytes int64
	// EngineWrittenBytes: the engine's counters (see package doc);
	// IOWrittenBytes: /proc/self/io write_bytes - cancelled_write_bytes.
	EngineWrittenBytes, IOWrittenBytes int64
	// LiveBytes, AllocatedBytes (end of run), AllocatedMaxBytes (samples).
	LiveBytes, AllocatedBytes, AllocatedMaxBytes int64
	// BlobAllocatedBytes: the value log's share of AllocatedBytes.
	BlobAllocatedBytes int64
	// SettledAllocatedBytes: allocated after writes stopped and GC ran to
	// quiescence (at most gcRoundsMax rounds).
	SettledAllocatedBytes int64
	// GCRewrittenBytes, GCPunchedBytes: value log GC (0 for inline/pebble).
	GCRewrittenBytes, GCPunchedBytes int64
	// PaddingBytes: alignment padding appended by foreground writes.
	PaddingBytes int64
	Seconds      float64
	// GCSeconds: the part of Seconds spent in foreground GC rounds.
	GCSeconds float64
	// CPUSeconds: user+system CPU time of the process during the update
	// phase (getrusage), less sensitive than Seconds to other load on the
	// machine. LoadAvg: the 1-minute load average at the end of the run.
	CPUSeconds, LoadAvg float64
	TimedOut            bool
}

func (r Result) WriteAmp() float64   { return float64(r.EngineWrittenBytes) / float64(r.UserBytes) }
func (r Result) WriteAmpIO() float64 { return float64(r.IOWrittenBytes) / float64(r.UserBytes) }
func (r Result) SpaceAmp() float64   { return float64(r.AllocatedBytes) / float64(r.LiveBytes) }
func (r Result) SpaceAmpMax() float64 {
	return float64(r.AllocatedMaxBytes) / float64(r.LiveBytes)
}
func (r Result) OpsPerSec() float64 { return float64(r.Updates) / r.Seconds }
func (r Result) BlobSpaceAmp() float64 {
	return float64(r.BlobAllocatedBytes) / float64(r.LiveBytes)
}
func (r Result) SpaceAmpSettled() float64 {
	return float64(r.SettledAllocatedBytes) / float64(r.LiveBytes)
}

// Label names the configuration of the run.
func (r Result) Label() string {
	if r.Aligned {
		return r.Mode.String() + "-aligned"
	}
	return r.Mode.String()
}

const keyBytes = 16

// Run runs the configured cases and returns every result, in order.
func Run(c Config) ([]Result, error) {
	if err := c.ensureDefaults(); err != nil {
		return nil, err
	}
	var out []Result
	if !c.SkipCase1 {
		for _, vs := range c.ValueSizesBytes {
			records := int(c.BudgetBytes / int64(vs))
			for _, m := range c.Modes {
				r, err := runOne(c, 1, m, false, vs, records, c.UpdatesFactor*records)
				if err != nil {
					return out, err
				}
				out = append(out, r)
			}
			if c.AlignedPunch && vs >= 4<<10 {
				r, err := runOne(c, 1, storage.ModePunch, true, vs, records, c.UpdatesFactor*records)
				if err != nil {
					return out, err
				}
				out = append(out, r)
			}
		}
	}
	if !c.SkipCase2 {
		records := int(c.BudgetBytes / int64(c.Case2ValueBytes))
		for _, f := range c.Case2Factors {
			for _, m := range []storage.Mode{storage.ModeRewrite, storage.ModePunch} {
				r, err := runOne(c, 2, m, false, c.Case2ValueBytes, records, f*records)
				if err != nil {
					return out, err
				}
				out = append(out, r)
			}
		}
	}
	fmt.Fprintf(c.Progress, "\r%-100s\r", "")
	return out, nil
}

func engineOptions(c Config, mode storage.Mode, aligned bool) storage.Options {
	// Blob files of 1/16 of the live data, as Titan's 256 MiB files are to a
	// few GiB; a memtable of 4 MiB whatever the budget, so that the LSM
	// flushes and compacts in every run (Pebble preallocates each WAL file
	// to 1.1 x the memtable, a fixed overhead counted in space amp).
	target := max(c.BudgetBytes/16, 1<<20)
	placement := vlog.PackLarge
	if aligned {
		placement = vlog.AlignLarge
	}
	return storage.Options{
		BlobPlacement:       placement,
		Mode:                mode,
		NoSync:              true,
		ThresholdBytes:      c.ThresholdBytes,
		BlobFileTargetBytes: target,
		MemTableBytes:       4 << 20,
		CacheBytes:          32 << 20,
		// GC runs in the foreground of the update loop (see runOne).
		GC: storage.GCOptions{Disabled: true},
	}
}

// gcRoundsMax bounds the GC rounds run at one GC point of the update loop.
const gcRoundsMax = 50

// runGC runs GC rounds until one does nothing (at most gcRoundsMax).
func runGC(e *storage.Engine) error {
	for i := 0; i < gcRoundsMax; i++ {
		rep, err := e.RunGC()
		if err != nil {
			return err
		}
		if len(rep.Punched)+len(rep.Rewritten)+len(rep.Deleted) == 0 {
			return nil
		}
	}
	return nil
}

func runOne(c Config, caseNum int, mode storage.Mode, aligned bool, valueBytes, records, updates int) (Result, error) {
	dir := filepath.Join(c.Dir, fmt.Sprintf("case%d-%s-%v-%d-%d", caseNum, mode, aligned, valueBytes, updates))
	if err := os.RemoveAll(dir); err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	e, err := storage.Open(dir, engineOptions(c, mode, aligned))
	if err != nil {
		return Result{}, err
	}
	closed := false
	defer func() {
		if !closed {
			e.Close()
		}
	}()
	rng := rand.New(rand.NewPCG(uint64(valueBytes), uint64(updates)))
	pool := make([]byte, 2<<20)
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	value := func(seq int) []byte {
		off := rng.IntN(len(pool) - valueBytes)
		v := pool[off : off+valueBytes]
		binary.LittleEndian.PutUint64(v, uint64(seq)) // distinct values
		return v
	}
	key := func(i int) []byte { return storage.DataKey([]byte(fmt.Sprintf("user%011d", i))) }
	label := fmt.Sprintf("case %d %-13s %4d KiB", caseNum, (Result{Mode: mode, Aligned: aligned}).Label(), valueBytes>>10)
	// Load.
	b := e.NewWriteBatch()
	for i := 0; i < records; i++ {
		if err := b.Set(key(i), value(i)); err != nil {
			return Result{}, err
		}
		if b.Len() >= 4<<20 || i == records-1 {
			if err := b.Commit(false); err != nil {
				return Result{}, err
			}
			b.Close()
			b = e.NewWriteBatch()
		}
		if i%1024 == 0 {
			fmt.Fprintf(c.Progress, "\r%s  load %d/%d          ", label, i, records)
		}
	}
	b.Close()
	// Update phase.
	r := Result{Case: caseNum, Mode: mode, Aligned: aligned, ValueBytes: valueBytes, Records: records,
		LiveBytes: int64(records) * int64(len(key(0))+valueBytes)}
	eng0 := engineWritten(e)
	io0, err := procIOWritten()
	if err != nil {
		return Result{}, err
	}
	bs0 := e.BlobStats()
	cpu0 := cpuSeconds()
	start := time.Now()
	sampleEvery := max(1, updates/50)
	// GC runs in the update loop, after every quarter blob file of updates,
	// until it finds no more work. Rejected: GC in its background goroutine
	// only. On two cores an unthrottled writer outruns it, and the figures
	// then measure scheduling, not the GC policy. In the foreground its cost
	// is charged to updates/s, as it would be by write stalls.
	gcEvery := max(1, int(engineOptions(c, mode, aligned).BlobFileTargetBytes/4)/valueBytes)
	gcDone := make(chan error, 1)
	gcBusy := false
	defer func() {
		if gcBusy {
			<-gcDone
		}
	}()
	for i := 0; i < updates; i++ {
		b := e.NewWriteBatch()
		k := key(rng.IntN(records))
		if err := b.Set(k, value(records+i)); err != nil {
			return Result{}, err
		}
		if err := b.Commit(false); err != nil {
			return Result{}, err
		}
		b.Close()
		r.Updates++
		r.UserBytes += int64(len(k) + valueBytes)
		if (i+1)%gcEvery == 0 {
			t0 := time.Now()
			if !c.GCOverlap {
				if err := runGC(e); err != nil {
					return Result{}, err
				}
			} else {
				if gcBusy {
					if err := <-gcDone; err != nil {
						return Result{}, err
					}
				}
				gcBusy = true
				go func() { gcDone <- runGC(e) }()
			}
			// With GCOverlap this is the time updates stalled for GC.
			r.GCSeconds += time.Since(t0).Seconds()
		}
		if i%sampleEvery == 0 {
			a, err := allocatedBytes(dir)
			if err != nil {
				return Result{}, err
			}
			r.AllocatedMaxBytes = max(r.AllocatedMaxBytes, a)
			el := time.Since(start)
			fmt.Fprintf(c.Progress, "\r%s  update %d/%d  %.0f ops/s  space amp %.2f   ", label, i, updates,
				float64(i+1)/el.Seconds(), float64(a)/float64(r.LiveBytes))
			if el > c.RunTimeMax {
				r.TimedOut = true
				break
			}
		}
	}
	if gcBusy {
		gcBusy = false
		if err := <-gcDone; err != nil {
			return Result{}, err
		}
	}
	r.Seconds = time.Since(start).Seconds()
	r.CPUSeconds = cpuSeconds() - cpu0
	r.LoadAvg = loadAvg()
	bs := e.BlobStats()
	r.EngineWrittenBytes = engineWritten(e) - eng0
	io1, err := procIOWritten()
	if err != nil {
		return Result{}, err
	}
	r.IOWrittenBytes = io1 - io0
	if r.AllocatedBytes, err = allocatedBytes(dir); err != nil {
		return Result{}, err
	}
	r.AllocatedMaxBytes = max(r.AllocatedMaxBytes, r.AllocatedBytes)
	r.GCRewrittenBytes = bs.GCRewrittenBytes - bs0.GCRewrittenBytes
	r.GCPunchedBytes = bs.GCPunchedBytes - bs0.GCPunchedBytes
	r.PaddingBytes = bs.PaddingBytes - bs0.PaddingBytes
	r.BlobAllocatedBytes = bs.AllocatedBytes
	if mode == storage.ModePebble {
		m := e.DB().Metrics()
		r.GCRewrittenBytes = int64(m.Total().BlobBytesCompacted)
	}
	// Settle: no more writes; run GC until a round does nothing.
	fmt.Fprintf(c.Progress, "\r%s  settling GC                                        ", label)
	if err := runGC(e); err != nil {
		return r, err
	}
	if r.SettledAllocatedBytes, err = allocatedBytes(dir); err != nil {
		return r, err
	}
	closed = true
	if err := e.Close(); err != nil {
		return r, err
	}
	return r, nil
}

// engineWritten sums what the engine wrote: Pebble's WAL, flushes and
// compactions (tables and Pebble's blob files) and the value log's appends.
func engineWritten(e *storage.Engine) int64 {
	m := e.DB().Metrics()
	t := m.Total()
	bs := e.BlobStats()
	return int64(m.WAL.BytesWritten+t.TableBytesFlushed+t.TableBytesCompacted+t.BlobBytesFlushed+t.BlobBytesCompacted) +
		bs.ForegroundWrittenBytes + bs.GCRewrittenBytes
}

// procIOWritten returns write_bytes - cancelled_write_bytes of this process.
func procIOWritten() (int64, error) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0, fmt.Errorf("vlogbench: %w", err)
	}
	defer f.Close()
	var w, c int64
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "write_bytes":
			w = n
		case "cancelled_write_bytes":
			c = n
		}
	}
	return w - c, s.Err()
}

// allocatedBytes sums st_blocks*512 over the files under dir.
func allocatedBytes(dir string) (int64, error) {
	var sum int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		sum += st.Blocks * 512
		return nil
	})
	return sum, err
}

func cpuSeconds() float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

// CPUMicrosPerUpdate is the process CPU time per update.
func (r Result) CPUMicrosPerUpdate() float64 { return 1e6 * r.CPUSeconds / float64(r.Updates) }
