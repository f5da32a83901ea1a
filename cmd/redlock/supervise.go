package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// supervised is a command running in its own process group, so that redlock can stop it and
// everything it started with one signal when the lock is lost.
type supervised struct {
	cmd      *exec.Cmd
	pgid     int
	exited   chan struct{} // closed once the command has exited and been reaped
	exitedAt time.Time     // valid after exited is closed
}

// startSupervised starts argv with env in a new process group. A terminal's Ctrl-C therefore
// reaches redlock only, which passes it on: the command never misses a signal, and redlock
// is never the one left behind.
func startSupervised(argv, env []string, stdin *os.File, stdout, stderr io.Writer) (*supervised, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &supervised{cmd: cmd, pgid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		// The exit status is read from cmd.ProcessState; Wait's error repeats it.
		_ = cmd.Wait()
		s.exitedAt = time.Now()
		close(s.exited)
	}()
	return s, nil
}

// startErrorCode is the shell's exit code for a command that could not be started.
func startErrorCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

// signalGroup sends sig to every process in the command's group. A group that is already
// gone is not an error.
func (s *supervised) signalGroup(sig syscall.Signal) error {
	err := syscall.Kill(-s.pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// groupAlive reports whether any process of the command's group still runs (the command
// itself may have exited and left children behind).
func (s *supervised) groupAlive() bool {
	return syscall.Kill(-s.pgid, 0) == nil
}

// exitCode is the command's exit code, 128+N if signal N ended it. Valid after exited.
func (s *supervised) exitCode() int {
	st := s.cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return st.ExitCode()
}
