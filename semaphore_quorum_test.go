package redlock

// Deterministic tests of the semaphore's quorum decisions over fake nodes
// (see quorum_test.go): splits across slots, partial wins cleaned up,
// tokens taken from the winning slot's registers alone.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// execSemaphore runs the semaphore scripts' logic, as lua/semaphore_*.lua
// do. f.mu is held.
func (f *fakeNode) execSemaphore(s *script, keys []string, argv []any) ([]int64, error) {
	str := func(i int) string { return fmt.Sprint(argv[i]) }
	num := func(i int) int64 { n, _ := strconv.ParseInt(fmt.Sprint(argv[i]), 10, 64); return n }
	if s == semaphoreReleaseScript {
		f.calls = append(f.calls, "release:"+str(0))
		won, keep, wonDeleted, deleted := int(num(2)), int(num(3)), false, false
		slots, record := keys[:len(keys)-1], keys[len(keys)-1]
		for i, k := range slots {
			if i != keep && f.keys[k] == str(0) {
				delete(f.keys, k)
				deleted = true
				wonDeleted = wonDeleted || i == won
			}
		}
		if f.keys[record] == str(4) {
			left := false
			for _, k := range slots {
				_, held := f.keys[k]
				left = left || held
			}
			if !left {
				delete(f.keys, record)
			}
		}
		if wonDeleted || (won < 0 && deleted) {
			return []int64{1}, nil
		}
		return []int64{0}, nil
	}
	f.tries++
	f.calls = append(f.calls, "acquire:"+str(0))
	k := (len(keys) - 1) / 2
	record := keys[2*k]
	if recorded, ok := f.keys[record]; ok && recorded != str(5) {
		n, _ := strconv.ParseInt(recorded, 10, 64)
		return []int64{2, 5000, 0, 0, n}, nil
	}
	first := int(num(4))
	slot, free := -1, -1
	for j := range k {
		i := (first + j) % k
		owner, held := f.keys[keys[i]]
		if owner == str(0) {
			slot = i
			break
		}
		if !held && free < 0 {
			free = i
		}
	}
	if slot < 0 && free >= 0 {
		slot = free
		f.keys[keys[slot]] = str(0)
	}
	if slot < 0 {
		return []int64{0, 5000, 0, 0, -1}, nil
	}
	f.keys[record] = str(5) // no expiry here: the fakes' keys never expire
	before, _ := strconv.ParseInt(f.keys[keys[k+slot]], 10, 64)
	if p := num(2); p > before {
		f.keys[keys[k+slot]] = str(2)
	}
	return []int64{1, before, 0, 0, int64(slot)}, nil
}

func TestSlotTallyDecidesAsSoonAsTheOutcomeIsKnown(t *testing.T) {
	const refused = -1
	cases := []struct {
		nodes, permits int
		votes          []int // the slot each node gave, or refused
		decidedAt      int   // index of the vote that decides, -1 if none
		won            bool
		slot           int
	}{
		{nodes: 5, permits: 2, votes: []int{0, 0, 0}, decidedAt: 2, won: true, slot: 0},
		{nodes: 5, permits: 2, votes: []int{0, 1, 1, 0, 1}, decidedAt: 4, won: true, slot: 1},
		// DESIGN §5's shape: the nodes split between slots; no slot reaches 3.
		{nodes: 5, permits: 3, votes: []int{0, 1, 2, 0, 1}, decidedAt: 4, won: false},
		{nodes: 5, permits: 5, votes: []int{0, 1, 2, 3}, decidedAt: 3, won: false}, // no slot can reach 3 now
		{nodes: 5, permits: 2, votes: []int{refused, refused, refused}, decidedAt: 2, won: false},
		{nodes: 5, permits: 2, votes: []int{0, refused, 1, refused}, decidedAt: 3, won: false},
		{nodes: 3, permits: 3, votes: []int{0, 1}, decidedAt: -1}, // the last node may still give either
		{nodes: 3, permits: 3, votes: []int{0, 1, 2}, decidedAt: 2, won: false},
		{nodes: 3, permits: 1, votes: []int{refused, 0, 0}, decidedAt: 2, won: true, slot: 0},
	}
	for _, tc := range cases {
		tl := newSlotTally(tc.nodes, tc.permits)
		d := decision{minPTTL: -1, votes: tl}
		at := -1
		for i, v := range tc.votes {
			r := nodeReply{node: i, won: v != refused, pick: int32(v)}
			if d.count(r) {
				at = i
				break
			}
		}
		if at != tc.decidedAt || d.won != tc.won || (tc.won && d.pick != tc.slot) {
			t.Errorf("%d nodes, %d permits, votes %v: decided at %d (won %v, slot %d), want at %d (won %v, slot %d)",
				tc.nodes, tc.permits, tc.votes, at, d.won, d.pick, tc.decidedAt, tc.won, tc.slot)
		}
	}
}

// ownedBy lists the keys of fs that hold value.
func ownedBy(fs []*fakeNode, value string) []string {
	var keys []string
	for i, f := range fs {
		f.mu.Lock()
		for k, v := range f.keys {
			if v == value {
				keys = append(keys, fmt.Sprintf("node %d: %s", i, k))
			}
		}
		f.mu.Unlock()
	}
	return keys
}

func TestSemaphoreSplitAcrossSlotsFailsAsContentionAndLeavesNoKey(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, Options{TTL: time.Minute})
	s, err := c.Semaphore("split", 3)
	if err != nil {
		t.Fatal(err)
	}
	// Each node has a different single slot free: each gives us another.
	for i, f := range fs {
		for j := range 3 {
			if j != i {
				f.set(s.slotKey(j), "other")
			}
		}
	}
	_, err = s.TryAcquire(context.Background())
	if !errors.Is(err, ErrLocked) || errors.Is(err, ErrNoQuorum) {
		t.Fatalf("a split across slots gave %v, want ErrLocked (contention)", err)
	}
	_ = c.Close() // waits for the cleanup
	for i, f := range fs {
		if v, _ := f.get(s.slotKey(i)); v != "" {
			t.Errorf("node %d still holds %q in the slot it gave us", i, v)
		}
	}
}

func TestSemaphorePartialWinTakesTheQuorumSlotAndReleasesTheOthers(t *testing.T) {
	fs := fakes(5)
	c := newFakeClient(t, fs, Options{TTL: time.Minute})
	s, err := c.Semaphore("partial", 2)
	if err != nil {
		t.Fatal(err)
	}
	// Nodes 0-2 have only slot 0 free, nodes 3-4 only slot 1, whose fence
	// registers there are far ahead: they must not raise our token, which
	// comes from slot 0's registers alone.
	const far = int64(1) << 60
	for i, f := range fs {
		if i < 3 {
			f.set(s.slotKey(1), "other")
		} else {
			f.set(s.slotKey(0), "other")
			f.set(s.slotKey(1)+fenceSuffix, strconv.FormatInt(far, 10))
		}
	}
	p, err := s.TryAcquire(context.Background())
	if err != nil {
		t.Fatalf("3 of 5 nodes gave slot 0: %v", err)
	}
	if p.Slot() != 0 {
		t.Fatalf("won slot %d, want 0", p.Slot())
	}
	if p.Token() >= far {
		t.Fatalf("token %d was raised by another slot's register", p.Token())
	}
	if got := countFence(fs[:3], s.slotKey(0)+fenceSuffix, p.Token()); got != 3 {
		t.Fatalf("slot 0's register holds the token on %d nodes, want 3", got)
	}
	value := p.a.value
	// Nodes 3 and 4 gave us slot 1: it is cleared there while we hold
	// slot 0, so that their permit is free for others.
	for deadline := time.Now().Add(5 * time.Second); ; {
		v3, _ := fs[3].get(s.slotKey(1))
		v4, _ := fs[4].get(s.slotKey(1))
		if v3 == "other" && v4 == "other" {
			t.Fatal("the test's own keys were touched")
		}
		if v3 != value && v4 != value {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot 1 still ours on nodes 3, 4 (%q, %q) while we hold slot 0", v3, v4)
		}
		time.Sleep(time.Millisecond) // polling a fake's state: the clean-up sends no event
	}
	if got, _ := fs[0].get(s.slotKey(0)); got != value {
		t.Fatalf("the won slot was cleared: %q", got)
	}
	if err := p.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	_ = c.Close()
	if left := ownedBy(fs, value); len(left) > 0 {
		t.Fatalf("keys of the released permit left: %v", left)
	}
}

func TestSemaphoreFullRefusesWithTheShortestRemainingTime(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, Options{TTL: time.Minute})
	s, err := c.Semaphore("full", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		f.set(s.slotKey(0), "a")
		f.set(s.slotKey(1), "b")
	}
	_, err = s.TryAcquire(context.Background())
	var le *LockedError
	if !errors.As(err, &le) || le.Remaining != 5*time.Second {
		t.Fatalf("a full semaphore gave %v, want a LockedError with the fake's 5s", err)
	}
}
