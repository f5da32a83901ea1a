package redlock

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
)

// An error about many nodes that each fail for a cause of their own stays
// short enough to read in a log line (issue 28: one acquire's error was
// 2,000 characters), and every node's own error is still reachable with
// errors.As: the cap cuts the text, never the errors.
func TestErrorsAreCappedButKeepEveryNodeError(t *testing.T) {
	var nodeErrs *multierror.Error
	for i := range 40 {
		cause := fmt.Errorf("ERR cause number %d of a node that answers with a long paragraph %s", i, strings.Repeat("and more ", 20))
		nodeErrs = multierror.Append(nodeErrs, &NodeError{Node: fmt.Sprintf("10.0.0.%d:6379", i), Err: cause})
	}
	last := &QuorumError{Op: "acquire", Name: "job", Needed: 21, Errors: nodeErrs}
	for _, err := range []error{
		last,
		&LockedError{Name: "job", Remaining: time.Second, Refused: 1, Nodes: 41, Errors: nodeErrs},
		&unreachableErr{name: "job", after: 30 * time.Second, last: last},
	} {
		msg := err.Error()
		if limit := maxErrorText + len("… (cut; every node's error is in the error's Errors)"); len(msg) > limit {
			t.Errorf("%T: %d bytes, more than the cap of %d: %s", err, len(msg), limit, msg)
		}
		if !strings.Contains(msg, `"job"`) {
			t.Errorf("%T: %s: does not name the lock", err, msg)
		}
		seen := 0
		for _, ne := range nodeErrs.Errors {
			want := ne.(*NodeError)
			var found bool
			var walk func(error)
			walk = func(e error) {
				if e == want {
					found = true
				}
				switch u := e.(type) {
				case interface{ Unwrap() []error }:
					for _, x := range u.Unwrap() {
						walk(x)
					}
				case interface{ Unwrap() error }:
					walk(u.Unwrap())
				}
			}
			walk(err)
			if found {
				seen++
			}
		}
		if seen != len(nodeErrs.Errors) {
			t.Errorf("%T: %d of %d node errors reachable through Unwrap", err, seen, len(nodeErrs.Errors))
		}
		var ne *NodeError
		if !errors.As(err, &ne) {
			t.Errorf("%T: errors.As finds no *NodeError", err)
		}
	}
}
