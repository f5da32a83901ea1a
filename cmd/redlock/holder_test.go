package main

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/quorumlabs/redlock"
)

// A long command line is cut to fit the library's bound on metadata, never inside a
// character, and the host, pid and start come first.
func TestHolderMetadataFitsTheBound(t *testing.T) {
	argv := []string{"./job.sh", strings.Repeat("é", redlock.MaxMetadataLen)}
	md := holderMetadata(argv, time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC))
	if len(md) > redlock.MaxMetadataLen || !utf8.ValidString(md) {
		t.Fatalf("metadata of %d bytes (valid UTF-8: %v), bound %d", len(md), utf8.ValidString(md), redlock.MaxMetadataLen)
	}
	if !strings.HasPrefix(md, "host=") || !strings.Contains(md, " started=2026-11-23T20:00:00Z cmd=./job.sh é") || !strings.HasSuffix(md, "…") {
		t.Fatalf("unexpected metadata: %.120q", md)
	}
	if got := printableMetadata("a\nb"); got != `"a\nb"` {
		t.Fatalf("a newline must be quoted, got %s", got)
	}
}
