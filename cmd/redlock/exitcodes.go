package main

import (
	"errors"
	"fmt"

	"github.com/quorumlabs/redlock"
)

// Exit codes. exec passes the command's own code through, so redlock's own codes sit where
// ordinary programs rarely go (the sysexits.h range), and each one means a single thing a
// calling script can act on.
const (
	exitOK = 0
	// exitFailure: status, nodes or unlock found a problem; demo found a safety violation.
	exitFailure = 1
	// exitUsage: bad flags or arguments, bad node URL, bad lock name, missing nodes, a
	// semaphore's --permits other than the number the nodes record for its held permits.
	exitUsage = 64
	// exitUnavailable (EX_UNAVAILABLE): exec could not reach a quorum of the nodes (down,
	// timing out, refusing connections, sitting out after a restart, not independent, in
	// cluster mode without the lock's slot), so nobody may hold the lock: the lock service
	// is down, not busy. Nothing was run.
	exitUnavailable = 69
	// exitNotAcquired: exec could not get the lock within --wait because another owner holds
	// it. Nothing was run: the job runs elsewhere, or can be retried later.
	exitNotAcquired = 75
	// exitLockLost: exec lost the lock while the command ran; the command was stopped and its
	// work may be incomplete or may have overlapped with another holder.
	exitLockLost = 76
	// exitCannotRun and exitNotFound follow the shell's conventions for a command that exists
	// but cannot be executed, and one that does not exist.
	exitCannotRun = 126
	exitNotFound  = 127
	// exitSignalBase + N: the command (or redlock, while waiting) was ended by signal N.
	exitSignalBase = 128
)

// exitCodesHelp is shown in the top-level and exec help.
const exitCodesHelp = `Exit codes:
  0      success (exec: the command exited 0)
  1..    exec: the command's own exit code, 128+N if it died of signal N
  1      status/nodes/unlock: a problem was found; demo: a safety check failed
  64     usage or configuration error (bad flag, bad URL, missing nodes, one address
         given twice, a semaphore's --permits other than the number its held permits
         were taken with)
  69     exec: no quorum of the nodes could be reached (down, timing out, refusing,
         sitting out, not independent, a cluster node not serving the lock's hash slot):
         the lock service is down; the command did not run
  75     exec: the lock is held by another owner (after --wait): the nodes saying so are
         alone more than N - quorum, whatever the others did; the command did not run
  76     exec: lock lost while the command ran; the command was stopped
  126    exec: the command could not be executed
  127    exec: the command was not found
  130    interrupted (SIGINT) before the command started, or demo stopped by Ctrl-C`

// usageError is a mistake in how redlock was invoked.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitStatus carries a chosen exit code along with the error explaining it.
type exitStatus struct {
	code int
	err  error
}

func (e *exitStatus) Error() string { return e.err.Error() }
func (e *exitStatus) Unwrap() error { return e.err }

func withExitCode(code int, err error) error { return &exitStatus{code: code, err: err} }

// silentExit ends the command with a code after it has already said everything it had to
// (exec passing on the child's exit code, a demo whose table shows the failure).
type silentExit struct{ code int }

func (e *silentExit) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCode maps an error returned by a subcommand to the process exit code.
func exitCode(err error) int {
	var silent *silentExit
	var status *exitStatus
	var usage *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &silent):
		return silent.code
	case errors.As(err, &status):
		return status.code
	case errors.As(err, &usage), errors.Is(err, redlock.ErrInvalidConfig):
		return exitUsage
	}
	return exitFailure
}
