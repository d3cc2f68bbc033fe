// Package vlogbench reproduces the evaluation of the hole-punching GC
// proposal (seed 002, TiKV's Titan) on Canopy's storage engine:
//
//   - Case 1: 100% updates with uniform keys, for each value size from
//     1 KiB to 512 KiB and each mode (inline, rewrite, punch, pebble);
//     record count = budget / value size, updates = 4 x record count.
//   - Case 2: 64 KiB values, a growing number of updates (1, 2, 4, 8 x the
//     record count), punch against rewrite, as in the proposal's Figure 6.
//
// Each run opens a fresh engine in a scratch directory, loads the records,
// then measures the update phase only:
//
//   - write amplification from the engine's own counters (Pebble WAL,
//     flush and compaction bytes, including Pebble's blob files, plus the
//     value log's foreground and GC appends) over the user bytes written
//     (key + value per update), and as a cross-check from /proc/self/io
//     (write_bytes - cancelled_write_bytes);
//   - space amplification: bytes allocated on disk (st_blocks * 512 over
//     every file of the store) over live bytes (record count x (key +
//     value)), at the end of the run and the maximum of periodic samples;
//   - updates per second; bytes rewritten by GC and bytes freed by punching.
//
// Contract: Run is bounded by Config (counts and a per-run time limit); it
// writes nothing outside Config.Dir and the output paths it is given.
// Figures are measured, never adjusted.
package vlogbench
