package redistest

import "syscall"

// childProcAttr puts redis-server in its own process group, so Kill, Pause and
// Resume reach any child it forks too, and has the kernel kill it if the test
// process dies before Stop (a panic, a test timeout). Pdeathsig follows the OS
// thread that started the child; the Go runtime keeps its threads unless a
// goroutine exits while locked to one, which this package never does.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
