package redlock

import (
	"errors"
	"strings"
	"testing"
)

// An ACL refusal inside a script reads differently on each server; every
// form must come out as NOPERM naming the refused command, still wrapping
// the server's error. The replies are the servers' own words (checked with
// redis-cli on Redis 7.0.15, Redis 8.6.3 and Valkey 9.1.2); the real-server
// tests in acl_test.go run them for real under REDLOCK_TEST_SERVER.
func TestExplainNamesTheCommandAnACLRefusedOnEveryServer(t *testing.T) {
	s := &script{src: "local a = 1\nredis.call('SET', KEYS[1], ARGV[1])\n"}
	for server, reply := range map[string]string{
		"redis-7.0":            "ERR The user executing the script can't run this command or subcommand script: 82960dcf18f55dc70287ce4e68658369e522bef9, on @user_script:2.",
		"redis-8.6/valkey-9.1": "ERR ACL failure in script: User no-set has no permissions to run the 'set' command script: 82960dcf18f55dc70287ce4e68658369e522bef9, on @user_script:2.",
		"batched redis-7.0":    "ERR The user executing the script can't run this command or subcommand" + batchCallMarker + "set')",
		"batched newer":        "ERR ACL failure in script: User no-set has no permissions to run the 'set' command" + batchCallMarker + "set')",
	} {
		orig := errors.New(reply)
		err := s.explain(orig)
		if !strings.HasPrefix(err.Error(), "NOPERM ") || !strings.Contains(err.Error(), "command 'set' ") {
			t.Errorf("%s: %q; want NOPERM naming 'set'", server, err)
		}
		if !errors.Is(err, orig) {
			t.Errorf("%s: %v does not wrap the server's error", server, err)
		}
	}
	other := errors.New("ERR Error running script: attempt to compare nil with number")
	if err := s.explain(other); err != other {
		t.Errorf("a script error that is no ACL refusal came back as %v", err)
	}
}
