//go:build !linux

package redistest

import "syscall"

// childProcAttr puts redis-server in its own process group, so Kill, Pause and
// Resume reach any child it forks too. Only Linux can also tie the child's
// life to ours (Pdeathsig).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
