package redlock

import "testing"

// TestScriptLearnsOnlyASHA: a reply to SCRIPT LOAD that is not a SHA-1 in
// hex leaves the script on EVAL, and the first SHA learned stays.
func TestScriptLearnsOnlyASHA(t *testing.T) {
	s := &script{src: "return 1", srcArg: "return 1"}
	for _, bad := range []string{"", "OK", "ABCDEF0123456789ABCDEF0123456789ABCDEF01", "e0e1f9fabfc9d4800c877a703b823ac0578ff83"} {
		s.learn(bad)
		if cmd, _ := s.head(); cmd != "eval" {
			t.Fatalf("learned %q", bad)
		}
	}
	const sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff831"
	s.learn(sha)
	s.learn("0000000000000000000000000000000000000000")
	if cmd, code := s.head(); cmd != "evalsha" || code != sha {
		t.Fatalf("head %v %v, want evalsha %s", cmd, code, sha)
	}
}
