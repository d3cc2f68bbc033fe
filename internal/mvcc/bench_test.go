package mvcc

import (
	"fmt"
	"testing"
)

// Benchmarks of the hot paths on an in-memory engine. They measure; no
// test depends on their figures.

func benchKey(i int) []byte { return []byte(fmt.Sprintf("user%08d", i)) }

// BenchmarkGet reads one of 1000 keys, each with 10 versions, at a
// timestamp in the middle of its history.
func BenchmarkGet(b *testing.B) {
	e := newTestEngine(b)
	batch := e.NewWriteBatch()
	for i := 0; i < 1000; i++ {
		for ts := uint64(1); ts <= 10; ts++ {
			if err := batch.Set(VersionKey(benchKey(i), ts*10), EncodeVersionValue([]byte("value"), false)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := batch.Commit(false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, found, err := Get(e, benchKey(i%1000), 55, 0); err != nil || !found {
			b.Fatal(found, err)
		}
	}
}

// BenchmarkScan scans 100 keys of 10 versions each at the latest timestamp.
func BenchmarkScan(b *testing.B) {
	e := newTestEngine(b)
	batch := e.NewWriteBatch()
	for i := 0; i < 100; i++ {
		for ts := uint64(1); ts <= 10; ts++ {
			if err := batch.Set(VersionKey(benchKey(i), ts), EncodeVersionValue([]byte("value"), false)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := batch.Commit(false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		kvs, _, err := Scan(e, nil, nil, 0, 0, 0, 0)
		if err != nil || len(kvs) != 100 {
			b.Fatal(len(kvs), err)
		}
	}
}

// BenchmarkPutIntentResolve writes an intent and commits it, as one
// transaction's write does, in an indexed batch.
func BenchmarkPutIntentResolve(b *testing.B) {
	e := newTestEngine(b)
	batch := e.NewBatch()
	defer func() { batch.Close() }()
	for i := 0; i < b.N; i++ {
		k := benchKey(i % 1000)
		start := uint64(2*i + 1)
		if err := PutIntent(batch, k, []byte("value"), false, TxnMeta{StartTs: start}); err != nil {
			b.Fatal(err)
		}
		if _, err := ResolveIntent(batch, k, start, start+1); err != nil {
			b.Fatal(err)
		}
		if i%100 == 99 {
			if err := batch.Commit(false); err != nil {
				b.Fatal(err)
			}
			batch.Close()
			batch = e.NewBatch()
		}
	}
}
