package redlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/quorumlabs/redlock"
	"github.com/redis/go-redis/v9"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url, addr string
		tls       bool
		user      string
	}{
		{"redis://127.0.0.1:6379", "127.0.0.1:6379", false, ""},
		{"redis://localhost", "localhost:6379", false, ""},
		{"rediss://app:s3cret@redis.example:6380/2", "redis.example:6380", true, "app"},
		{"redis://:onlypass@10.0.0.1:7000", "10.0.0.1:7000", false, ""},
	} {
		o, err := redlock.ParseURL(tc.url)
		if err != nil {
			t.Errorf("%s: %v", redlock.RedactURL(tc.url), err)
			continue
		}
		if o.Addr != tc.addr || (o.TLSConfig != nil) != tc.tls || o.Username != tc.user {
			t.Errorf("%s: addr %q tls %v user %q", redlock.RedactURL(tc.url), o.Addr, o.TLSConfig != nil, o.Username)
		}
	}
}

func TestParseURLErrorsNameTheValueButNotThePassword(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"", "empty"},
		{"http://u:hunter2@host:1", "redis://"},
		{"redis://u:hunter2@:6379", "no host"},
		{"redis://u:hunter2@host:notaport", "hunter2"}, // only checked for absence below
		{"redis://u:hunter2@host:6379/notadb", "db"},
		{"::not a url hunter2", "valid URL"},
	} {
		_, err := redlock.ParseURL(tc.url)
		if err == nil {
			t.Errorf("%s: no error", redlock.RedactURL(tc.url))
			continue
		}
		if !errors.Is(err, redlock.ErrInvalidConfig) {
			t.Errorf("%s: %v does not match ErrInvalidConfig", redlock.RedactURL(tc.url), err)
		}
		if strings.Contains(err.Error(), "hunter2") && !strings.HasPrefix(tc.url, "::") {
			t.Errorf("the password shows in %q", err)
		}
		if tc.want != "hunter2" && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q does not say %q", err, tc.want)
		}
	}
}

func TestNewFromURLsRejectsABadURLAmongGoodOnes(t *testing.T) {
	_, err := redlock.NewFromURLs([]string{"redis://127.0.0.1:1", "redis://u:hunter2@host:port"}, redlock.Options{})
	var ce *redlock.ConfigError
	if !errors.As(err, &ce) || ce.Field != "node URL" || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("got %v", err)
	}
}

// FuzzParseURL: parsing any input neither panics nor hangs, and when the
// input follows a password, neither the error nor RedactURL shows it.
func FuzzParseURL(f *testing.F) {
	for _, seed := range []string{"h:1/0", "h", "h:1?dial_timeout=1s", "h:x", "@", "[::1]:6379", "%zz"} {
		f.Add(seed)
	}
	const secret = "Zq9SECRETzq"
	f.Fuzz(func(t *testing.T, rest string) {
		_, _ = redlock.ParseURL(rest)
		withPw := "redis://user:" + secret + "@" + rest
		if _, err := redlock.ParseURL(withPw); err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("password in error: %v", err)
		}
		if r := redlock.RedactURL(withPw); strings.Contains(r, secret) {
			t.Fatalf("password in %q", r)
		}
		// The Cluster and Sentinel forms, with the password in the user info
		// and, for Sentinel, the master's in the query.
		for _, raw := range []string{
			"redis+cluster://user:" + secret + "@" + rest,
			"rediss+sentinel://user:" + secret + "@" + rest,
			"redis+sentinel://h:1?master_name=m&password=" + secret + "&" + rest,
		} {
			if _, err := redlock.ParseNodeURL(raw); err != nil && strings.Contains(err.Error(), secret) {
				t.Fatalf("password in error: %v", err)
			}
			if r := redlock.RedactURL(raw); strings.Contains(r, secret) {
				t.Fatalf("password in %q", r)
			}
		}
	})
}

// A refused connection is an answer: NewFromURLs' clients dial once, not five
// times with backoff, and the node's error says "connection refused".
// go-redis' lines about the client's own node go to Options.Logger, not
// stderr, and a node that stays down is told once, not at every dial.
func TestNewFromURLsReportsARefusedDialAtOnce(t *testing.T) {
	rec := &recordingHandler{}
	addr := refusedAddr(t)
	c, err := redlock.NewFromURLs([]string{"redis://" + addr}, redlock.Options{AllowNoFaultTolerance: true, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 5 {
		infos := c.Nodes(context.Background())
		if !errors.Is(infos[0].Err, syscall.ECONNREFUSED) {
			t.Fatalf("want connection refused, got %v", infos[0].Err)
		}
	}
	lines := rec.lines()
	dials := 0
	for _, line := range lines {
		if strings.Contains(line, "failed to dial after") {
			dials++
			if !strings.Contains(line, "after 1 attempts") || !strings.Contains(line, "node="+addr) {
				t.Errorf("go-redis retried the dial, or the line does not name the node: %s", line)
			}
		}
	}
	if dials != 1 {
		t.Fatalf("want the failed dial in Options.Logger once for 6 dials (New's probe, 5 Nodes), got %d: %q", dials, lines)
	}
}

// A port outside 1..65535 is a configuration error naming it, not a dial
// failure later; "redis://secret@host" puts a password in the user slot, so
// the whole user info is hidden wherever a URL is shown.
func TestParseURLChecksThePortAndHidesAllUserInfo(t *testing.T) {
	for _, raw := range []string{"redis://127.0.0.1:99999", "redis://127.0.0.1:0", "redis://s3cretpw@127.0.0.1:65536"} {
		_, err := redlock.ParseURL(raw)
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "want 1 to 65535") {
			t.Errorf("%s: got %v, want a ConfigError about the port", redlock.RedactURL(raw), err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("the user info shows in %q", err)
		}
	}
	if _, err := redlock.ParseURL("redis://127.0.0.1:65535"); err != nil {
		t.Errorf("port 65535: %v", err)
	}
	redacts(t, map[string]string{
		"redis://s3cretpw@host:1":          "redis://xxxxx@host:1",
		"redis://user:s3cretpw@host:1/2":   "redis://xxxxx@host:1/2",
		"rediss://:s3cretpw@host:1":        "rediss://xxxxx@host:1",
		"redis://host:1?password=s3cretpw": "redis://host:1?password=xxxxx",
	})
}

// Node numbers in messages count from 1, as a person counts the URLs given.
func TestDuplicateNodeMessageCountsFromOne(t *testing.T) {
	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	b := redis.NewClient(&redis.Options{Addr: "127.0.0.1:2"})
	defer a.Close()
	defer b.Close()
	_, err := redlock.New([]redis.UniversalClient{a, b, b}, redlock.Options{})
	if !errors.Is(err, redlock.ErrNotIndependent) || !strings.Contains(err.Error(), "nodes 2 and 3 of 3") {
		t.Fatalf("got %v, want the 2nd and 3rd nodes named", err)
	}
}

// The quorum error counts in words a reader parses at once, and a verify
// (which concerns no lock) shows no empty name.
func TestQuorumErrorWording(t *testing.T) {
	for _, tc := range []struct {
		err  *redlock.QuorumError
		want string
	}{
		{&redlock.QuorumError{Op: "acquire", Name: "job", Won: 0, Needed: 3}, `redlock: acquire "job": no quorum: 0 nodes agreed, 3 needed`},
		{&redlock.QuorumError{Op: "acquire", Name: "job", Won: 1, Needed: 2}, `redlock: acquire "job": no quorum: 1 node agreed, 2 needed`},
		{&redlock.QuorumError{Op: "verify", Won: 2, Needed: 3}, `redlock: verify: no quorum: 2 nodes agreed, 3 needed`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// redacts checks RedactURL on each URL of cases: the want beside it, its
// passwords replaced.
func redacts(t *testing.T, cases map[string]string) {
	t.Helper()
	for raw, want := range cases {
		if got := redlock.RedactURL(raw); got != want {
			t.Errorf("RedactURL: got %q, want %q", got, want)
		}
	}
}
