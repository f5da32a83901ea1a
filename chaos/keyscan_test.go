package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// The final scan of check (e) covers every key a scheme keeps while a lock
// is held: a holder key that outlived its lock is a finding, like a lock key.
func TestFinalScanFindsAHolderKeyLeftBehind(t *testing.T) {
	ctx := context.Background()
	nodes := redistest.StartT(t, 2, redistest.Options{})
	holderKey := RedlockScheme{}.ExtraKeys()[0]
	if err := nodes.Servers[1].Client().Set(ctx, holderKey, "left", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	finalState(ctx, rec, nodes.Servers[0].Client(), nodes.Addrs(), nil, scannedKeys(RedlockScheme{}))
	res := CheckHistory(rec.History(), CheckOptions{})
	if res.Counts[CheckLeftoverKey] != 1 {
		t.Fatalf("want one key left behind (on n1), got %d: %+v", res.Counts[CheckLeftoverKey], res.Violations)
	}
	if v := res.Violations[0]; !strings.Contains(v.Detail, "n1") || !strings.Contains(v.Detail, holderKey) {
		t.Fatalf("the finding does not name n1 and %s: %s", holderKey, v.Detail)
	}
}
