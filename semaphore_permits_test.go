package redlock_test

// A semaphore's number of permits is recorded on the nodes beside its slots:
// two programs that disagree about it for one name must not let the larger
// number of holders in (issue 17 item 6).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// wantPermitsMismatch fails unless err is a *PermitsMismatchError naming
// both numbers, matching ErrInvalidConfig.
func wantPermitsMismatch(t *testing.T, what string, err error, asked int, recorded int64) {
	t.Helper()
	var pm *redlock.PermitsMismatchError
	if !errors.As(err, &pm) || !errors.Is(err, redlock.ErrInvalidConfig) {
		t.Fatalf("%s: %v, want a *PermitsMismatchError matching ErrInvalidConfig", what, err)
	}
	if pm.Permits != asked || pm.Recorded != recorded {
		t.Fatalf("%s: the error names %d asked and %d recorded, want %d and %d: %v", what, pm.Permits, pm.Recorded, asked, recorded, err)
	}
}

func TestSemaphoreRefusesAnotherNumberOfPermitsWhileAPermitLives(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	ctx := context.Background()
	c := newClient(t, cl, redlock.Options{TTL: time.Minute})
	one := newSemaphore(t, c, "printer", 1)
	two := newSemaphore(t, newClient(t, cl, redlock.Options{TTL: time.Minute, MaxWait: 10 * time.Second}), "printer", 2)

	held, err := one.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := two.TryAcquire(ctx)
	if err == nil {
		t.Fatalf("two holders of a semaphore of 1 permit: a client of 2 permits got slot %d while slot %d is held", p.Slot(), held.Slot())
	}
	wantPermitsMismatch(t, "TryAcquire with 2 permits while a permit of 1 lives", err, 2, 1)
	// Acquire does not wait for a configuration to change: it returns at once.
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = two.Acquire(waitCtx)
	if waitCtx.Err() != nil {
		t.Fatalf("Acquire with 2 permits waited until its context ended: %v", err)
	}
	wantPermitsMismatch(t, "Acquire with 2 permits", err, 2, 1)
	// Holders reads as the acquire would: the slots of 2 permits are not
	// the semaphore the nodes hold.
	_, err = two.Holders(ctx)
	wantPermitsMismatch(t, "Holders with 2 permits", err, 2, 1)
	// The refused attempts leave no key of theirs: slot 1 exists only for 2
	// permits. (A node that answered after the decision may have given one;
	// the attempt's cleanup deletes it.)
	eventually(t, 5*time.Second, "no slot 1 left by the refused attempts", func() bool {
		for _, srv := range cl.Servers {
			if srv.Client().Exists(ctx, c.Keys(two.Name()).Permit(1)).Val() != 0 {
				return false
			}
		}
		return true
	})

	// The same number is admitted as before: the one permit is held.
	if _, err := one.TryAcquire(ctx); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("a second permit of 1: %v, want ErrLocked", err)
	}
	// Once the last permit of 1 is given back, the name is free for another number.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p1, err := two.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("2 permits after the permit of 1 was released: %v", err)
	}
	p2, err := two.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the second of 2 permits: %v", err)
	}
	if _, err := one.TryAcquire(ctx); err == nil {
		t.Fatal("a client of 1 permit got one while 2 permits of 2 are held")
	} else {
		wantPermitsMismatch(t, "TryAcquire with 1 permit while permits of 2 live", err, 1, 2)
	}
	for _, p := range []*redlock.Permit{p1, p2} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A node still answering an acquire releases once it answered.
	eventually(t, 5*time.Second, "no slot key left after the releases", func() bool {
		return len(semaphoreKeysLeft(t, cl, c, two)) == 0
	})
}

// checkPermitsRecord fails unless every node records want permits for s
// and the record lives at least as long as every slot key there: a slot
// whose record expired first could be joined by slots of another number.
func checkPermitsRecord(t *testing.T, cl *redistest.Cluster, c *redlock.Client, s *redlock.Semaphore, want string, when string) {
	t.Helper()
	ctx := context.Background()
	for _, srv := range cl.Servers {
		rdb := srv.Client()
		got, err := rdb.Get(ctx, c.Keys(s.Name()).Permits).Result()
		if err != nil {
			t.Fatalf("%s: %s: the record %s: %v", when, srv.Addr, c.Keys(s.Name()).Permits, err)
		}
		if got != want {
			t.Fatalf("%s: %s records %q permits, want %q", when, srv.Addr, got, want)
		}
		// The record first: the slots' times to live only shrink while
		// they are read after it.
		record := rdb.PTTL(ctx, c.Keys(s.Name()).Permits).Val()
		longest := time.Duration(-1)
		for i := range redlock.PermitsOf(s) {
			if d := rdb.PTTL(ctx, c.Keys(s.Name()).Permit(i)).Val(); d > longest {
				longest = d
			}
		}
		if longest > 0 && record < longest {
			t.Fatalf("%s: %s: the record expires in %v, before a slot key (%v)", when, srv.Addr, record, longest)
		}
	}
}

func permitsRecords(t *testing.T, cl *redistest.Cluster, c *redlock.Client, s *redlock.Semaphore) int64 {
	t.Helper()
	var n int64
	for _, srv := range cl.Servers {
		n += srv.Client().Exists(context.Background(), c.Keys(s.Name()).Permits).Val()
	}
	return n
}

func TestSemaphorePermitsRecordOutlivesEverySlotKey(t *testing.T) {
	// Two nodes, whose quorum is both: every acquire, extend and release has
	// answered on every node when it returns, so the checks can read every
	// node.
	cl := redistest.StartT(t, 2, redistest.Options{})
	ctx := context.Background()
	c := newClient(t, cl, redlock.Options{TTL: time.Minute})
	s, err := c.Semaphore("render", 2)
	if err != nil {
		t.Fatal(err)
	}

	long, err := s.TryAcquire(ctx, redlock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	checkPermitsRecord(t, cl, c, s, "2", "one permit for an hour")
	// A shorter permit never shortens the record.
	short, err := s.TryAcquire(ctx, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	checkPermitsRecord(t, cl, c, s, "2", "and one for a minute")
	for _, srv := range cl.Servers {
		if d := srv.Client().PTTL(ctx, c.Keys(s.Name()).Permits).Val(); d <= time.Minute {
			t.Fatalf("%s: a permit of a minute cut the record of an hour's permit to %v", srv.Addr, d)
		}
	}
	// Releasing one permit keeps the record of the other.
	if err := long.Release(ctx); err != nil {
		t.Fatal(err)
	}
	checkPermitsRecord(t, cl, c, s, "2", "after the hour's permit was released")
	// ...and the record now ends with the minute's slot, not an hour later:
	// left there, it would refuse another number long after the last permit.
	for _, srv := range cl.Servers {
		if record := srv.Client().PTTL(ctx, c.Keys(s.Name()).Permits).Val(); record > 2*time.Minute {
			t.Fatalf("%s: the record expires in %v, with the released permit of an hour, not with the last slot key (a minute)", srv.Addr, record)
		}
	}

	// An extension lengthens the record with the slot: shorten the record
	// on every node (the time that passed since the acquire, made long),
	// then extend.
	for _, srv := range cl.Servers {
		if err := srv.Client().PExpire(ctx, c.Keys(s.Name()).Permits, time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := short.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	checkPermitsRecord(t, cl, c, s, "2", "after an extension")

	// A node that lost the slot and the record (a restart without data) gets
	// both back from the extension's repair.
	lost := cl.Servers[0].Client()
	if err := lost.Del(ctx, c.Keys(s.Name()).Permit(short.Slot()), c.Keys(s.Name()).Permits).Err(); err != nil {
		t.Fatal(err)
	}
	if err := short.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	if lost.Get(ctx, c.Keys(s.Name()).Permit(short.Slot())).Val() == "" {
		t.Fatal("the extension did not repair the slot key on the node that lost it")
	}
	checkPermitsRecord(t, cl, c, s, "2", "after a repair")

	// The last release takes the record with it.
	if err := short.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := permitsRecords(t, cl, c, s); n != 0 {
		t.Fatalf("after the last release %d nodes still record the number of permits", n)
	}
	// A refused attempt leaves no record either: both permits held, a third
	// attempt from another client is refused and cleaned up (Close waits for
	// the cleanup).
	a, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := newClient(t, cl, redlock.Options{TTL: time.Minute})
	third, err := other.Semaphore("render", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := third.TryAcquire(ctx); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("a third permit of 2: %v, want ErrLocked", err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*redlock.Permit{a, b} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := permitsRecords(t, cl, c, s); n != 0 {
		t.Fatalf("after every release %d nodes still record the number of permits", n)
	}
}

func TestSemaphoreOtherPermitsRecordedRefuseOnlyWhereAQuorumIsDenied(t *testing.T) {
	// 4 nodes, quorum 3: two denials already lose the round (4 - 3 = 1
	// refusal may be borne), so the client must read on to tell a quorum
	// of denials.
	cl := redistest.StartT(t, 4, redistest.Options{})
	ctx := context.Background()
	c := newClient(t, cl, redlock.Options{TTL: time.Minute})
	s := newSemaphore(t, c, "ingest", 1)
	record := func(nodes int) {
		t.Helper()
		for i, srv := range cl.Servers {
			var err error
			if i < nodes {
				// What a client of 3 permits leaves while one of its slots lives.
				err = srv.Client().Set(ctx, c.Keys(s.Name()).Permits, "3", time.Minute).Err()
			} else {
				err = srv.Client().Del(ctx, c.Keys(s.Name()).Permits).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	// One node of 4 records 3 permits: the other three are a quorum.
	record(1)
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("another number recorded on 1 node of 4: %v", err)
	}
	if got := cl.Servers[0].Client().Get(ctx, c.Keys(s.Name()).Permit(p.Slot())).Val(); got != "" {
		t.Fatal("the node recording another number gave a slot all the same")
	}
	if got := cl.Servers[0].Client().Get(ctx, c.Keys(s.Name()).Permits).Val(); got != "3" {
		t.Fatalf("the node recording 3 permits records %q after the acquire", got)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cl.Servers[0].Client().Get(ctx, c.Keys(s.Name()).Permits).Val(); got != "3" {
		t.Fatalf("the release of a permit of 1 removed the record of 3 permits (now %q)", got)
	}

	// Two of 4: neither a quorum of slots nor of denials. That is contention
	// (a record lives only while its slots are held), not a configuration
	// error: Acquire may wait it out.
	record(2)
	_, err = s.TryAcquire(ctx)
	if !errors.Is(err, redlock.ErrLocked) || errors.Is(err, redlock.ErrInvalidConfig) {
		t.Fatalf("another number recorded on 2 nodes of 4: %v, want ErrLocked and no configuration error", err)
	}
	if _, err := s.Holders(ctx); err != nil {
		t.Fatalf("Holders with another number recorded on 2 nodes of 4: %v", err)
	}

	// Three and four of 4: a quorum denied.
	for _, nodes := range []int{3, 4} {
		record(nodes)
		for range 5 { // the denials may come in any order
			_, err = s.TryAcquire(ctx)
			wantPermitsMismatch(t, "another number recorded on a quorum", err, 1, 3)
			var pm *redlock.PermitsMismatchError
			if errors.As(err, &pm); pm.Denied < 3 || pm.Nodes != 4 {
				t.Fatalf("%d nodes of 4 record 3 permits: the error counts %d denials of %d nodes", nodes, pm.Denied, pm.Nodes)
			}
		}
		st, err := s.Holders(ctx)
		wantPermitsMismatch(t, "Holders", err, 1, 3)
		if st == nil || st.Recorded != 3 {
			t.Fatalf("Holders: %+v, want Recorded 3", st)
		}
	}
	// The attempts that nodes without a record answered are cleaned up.
	eventually(t, 5*time.Second, "no slot key left by the denied attempts", func() bool {
		return len(semaphoreKeysLeft(t, cl, c, s)) == 0
	})
}
