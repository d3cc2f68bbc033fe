package process

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// corruptValueBytes: values of this size go to blob files (above the
// default --value-threshold of 8 KiB).
const corruptValueBytes = 16 << 10

func corruptValue(i int) []byte {
	head := fmt.Sprintf("<<damage-test value %02d>>", i)
	return append([]byte(head), bytes.Repeat([]byte{byte('a' + i%26)}, corruptValueBytes-len(head))...)
}

// TestCorruptValueIsRepaired (issue 13, item 5): a blob record with a bad
// checksum on the leaseholder of a range (punch storage mode, three
// records overwritten in the blob file while the node runs). Before the
// fix every read of those keys failed with "internal error ...
// corruption" while two healthy replicas held the values, and the node
// logged nothing. Now:
//
//   - every acknowledged write reads back, the damaged ones included (the
//     damaged replica hands its lease over and refers clients on);
//   - the node logs the corruption once, naming the blob file and offset;
//   - the damaged replica is replaced by a new replica on the same node
//     (a new replica ID), filled by a snapshot from a healthy one;
//   - once stopped, that node's store holds no value that fails its
//     check (read back offline through the storage engine).
func TestCorruptValueIsRepaired(t *testing.T) {
	needBinary(t)
	c := newClusterWith(t, 3, []string{"--storage-mode", "punch"})
	c.mustCLI("init", "--host", c.addrs[0])
	c.waitLive(3)
	db := openClient(t, c)
	defer db.Close()
	const n = 30
	acked := map[string]string{}
	for i := 0; i < n; i++ {
		k, v := fmt.Sprintf("dmg/%02d", i), corruptValue(i)
		c.eventually("put "+k, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), opMax)
			defer cancel()
			return db.Put(ctx, []byte(k), v)
		})
		acked[k] = string(v)
	}
	// Wait for the lease to settle where the nodes' balancing puts it
	// (the voter at position range ID modulo the voters, as
	// kvserver.preferredLeader): the damage must be on the leaseholder.
	var victim int
	var rangeID uint64
	c.eventually("the lease on its preferred node", func() error {
		victim, rangeID = leaseholderOf(c, db, []byte("dmg/00"))
		ctx, cancel := context.WithTimeout(context.Background(), opMax)
		defer cancel()
		d, err := rangeDesc(ctx, db, rangeID)
		if err != nil {
			return err
		}
		var voters []uint64
		for _, r := range d.Replicas {
			if r.Type == rpcpb.ReplicaType_VOTER {
				voters = append(voters, r.NodeId)
			}
		}
		if len(voters) != 3 {
			return fmt.Errorf("descriptor %v", d)
		}
		if want := voters[rangeID%3]; nodeIDAt(t, c, db, victim) != want {
			return fmt.Errorf("lease on slot %d, preferred n%d", victim+1, want)
		}
		return nil
	})
	oldPeer := replicaPeer(t, c, db, rangeID, victim)
	t.Logf("damaging the blob records of the leaseholder n%d (slot %d) of r%d", nodeIDAt(t, c, db, victim), victim+1, rangeID)

	// Overwrite 64 bytes inside the values of three keys, in the blob
	// files of the leaseholder's store (the Raft log, in the LSM, is left
	// alone).
	damageValues(t, c.nodes[victim].store, []int{3, 11, 20})

	// Every acknowledged write reads back, the damaged ones first.
	for _, i := range []int{3, 11, 20} {
		k := fmt.Sprintf("dmg/%02d", i)
		c.readBack(db, "after the damage", map[string]string{k: acked[k]})
	}
	c.readBack(db, "after the damage", acked)

	log := readFile(t, c.nodes[victim].logPath)
	if !strings.Contains(log, "store corruption") || !strings.Contains(log, "offset") || !strings.Contains(log, ".blob") {
		t.Fatalf("node %d logged no corruption line naming the file and offset; its log ends:\n%s", victim+1, lastLines(log, 30))
	}

	// The damaged replica is replaced: the range has three voters again,
	// one of them a new replica on the victim's node.
	waitReplaced(t, c, db, rangeID, victim, oldPeer)
	waitCaughtUp(t, c, db, victim)
	c.readBack(db, "after the repair", acked)

	// Offline: every value in the rebuilt node's store passes its check.
	for i := range c.nodes {
		c.stop(i)
	}
	checkStoreValues(t, c.nodes[victim].store, n)
}

// TestScrubRepairsFollower (issue 13, item 5, the scrub): a damaged blob
// record on a follower, which serves no reads, is found by the node's
// scrub (--scrub-interval), and that replica is replaced from a healthy
// one like one found damaged by a read.
func TestScrubRepairsFollower(t *testing.T) {
	needBinary(t)
	c := newClusterWith(t, 3, []string{"--storage-mode", "punch", "--scrub-interval", "1s"})
	c.mustCLI("init", "--host", c.addrs[0])
	c.waitLive(3)
	db := openClient(t, c)
	defer db.Close()
	const n = 10
	acked := map[string]string{}
	for i := 0; i < n; i++ {
		k, v := fmt.Sprintf("dmg/%02d", i), corruptValue(i)
		c.eventually("put "+k, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), opMax)
			defer cancel()
			return db.Put(ctx, []byte(k), v)
		})
		acked[k] = string(v)
	}
	lh, rangeID := leaseholderOf(c, db, []byte("dmg/00"))
	victim := (lh + 1) % 3
	waitCaughtUp(t, c, db, victim)
	oldPeer := replicaPeer(t, c, db, rangeID, victim)
	damageValues(t, c.nodes[victim].store, []int{4})
	waitReplaced(t, c, db, rangeID, victim, oldPeer)
	log := readFile(t, c.nodes[victim].logPath)
	if !strings.Contains(log, "store corruption") || !strings.Contains(log, "offset") {
		t.Fatalf("node %d logged no corruption line naming the file and offset; its log ends:\n%s", victim+1, lastLines(log, 30))
	}
	waitCaughtUp(t, c, db, victim)
	c.readBack(db, "after the repair", acked)
	for i := range c.nodes {
		c.stop(i)
	}
	checkStoreValues(t, c.nodes[victim].store, n)
}

// damageValues overwrites 64 bytes inside the values corruptValue(i), for
// each i of which, in the blob files of store (the Raft log, in the LSM,
// is left alone).
func damageValues(t *testing.T, store string, which []int) {
	t.Helper()
	blobs, _ := filepath.Glob(filepath.Join(store, "blob", "*.blob"))
	damaged := 0
	for _, i := range which {
		head := corruptValue(i)[:25]
		for _, f := range blobs {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			at := bytes.Index(b, head)
			if at < 0 {
				continue
			}
			fh, err := os.OpenFile(f, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fh.WriteAt(bytes.Repeat([]byte{'X'}, 64), int64(at+4000)); err != nil {
				t.Fatal(err)
			}
			_ = fh.Close()
			damaged++
			break
		}
	}
	if damaged != len(which) {
		t.Fatalf("found %d of the %d values to damage in %v", damaged, len(which), blobs)
	}
}

// waitReplaced waits until rangeID has three voters again, one of them a
// replica on slot's node other than oldPeer.
func waitReplaced(t *testing.T, c *cluster, db *client.DB, rangeID uint64, slot int, oldPeer uint64) {
	t.Helper()
	c.eventually("a new replica of the range on the damaged node", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), opMax)
		defer cancel()
		d, err := rangeDesc(ctx, db, rangeID)
		if err != nil {
			return err
		}
		voters := 0
		for _, r := range d.Replicas {
			if r.Type == rpcpb.ReplicaType_VOTER {
				voters++
			}
		}
		p := replicaPeerIn(d, nodeIDAt(t, c, db, slot))
		if voters != 3 || p == 0 || p == oldPeer {
			return fmt.Errorf("descriptor %v (damaged replica's peer %x)", d, oldPeer)
		}
		return nil
	})
}

// checkStoreValues opens the stopped node's store read-only and reads
// every data value: each must pass its checks; at least min of them.
func checkStoreValues(t *testing.T, store string, min int) {
	t.Helper()
	eng, err := storage.Open(store, storage.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	it, err := eng.NewIter([]byte{storage.PrefixData}, storage.DataSpanEnd())
	if err != nil {
		t.Fatal(err)
	}
	values := 0
	for ok := it.First(); ok; ok = it.Next() {
		if _, err := it.Value(); err != nil {
			t.Errorf("the rebuilt store still holds a damaged value: %v", err)
		}
		values++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if values < min {
		t.Fatalf("the rebuilt store holds %d data values, want at least %d", values, min)
	}
}

// nodeIDAt returns the node ID of the node at slot.
func nodeIDAt(t *testing.T, c *cluster, db *client.DB, slot int) uint64 {
	t.Helper()
	var id uint64
	c.eventually("node ID of slot", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), opMax)
		defer cancel()
		info, err := db.ClusterInfo(ctx)
		if err != nil {
			return err
		}
		for _, nd := range info.Nodes {
			if nd.Address == c.addrs[slot] {
				id = nd.NodeId
				return nil
			}
		}
		return fmt.Errorf("no node at %s", c.addrs[slot])
	})
	return id
}

func rangeDesc(ctx context.Context, db *client.DB, rangeID uint64) (*rpcpb.RangeDescriptor, error) {
	ranges, err := db.Ranges(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range ranges {
		if r.Desc.RangeId == rangeID {
			return r.Desc, nil
		}
	}
	return nil, fmt.Errorf("no range r%d", rangeID)
}

// replicaPeerIn returns the Raft peer identity (replica ID, node ID) of
// d's replica on nodeID as one number, 0 if none.
func replicaPeerIn(d *rpcpb.RangeDescriptor, nodeID uint64) uint64 {
	for _, r := range d.Replicas {
		if r.NodeId == nodeID {
			return r.ReplicaId<<32 | r.NodeId
		}
	}
	return 0
}

func replicaPeer(t *testing.T, c *cluster, db *client.DB, rangeID uint64, slot int) uint64 {
	t.Helper()
	var p uint64
	c.eventually("replica of the range", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), opMax)
		defer cancel()
		d, err := rangeDesc(ctx, db, rangeID)
		if err != nil {
			return err
		}
		if p = replicaPeerIn(d, nodeIDAt(t, c, db, slot)); p == 0 {
			return fmt.Errorf("no replica on slot %d in %v", slot+1, d)
		}
		return nil
	})
	return p
}
