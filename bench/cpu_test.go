package bench

import (
	"strings"
	"testing"
	"time"
)

func TestServerCPUAddsSysAndUser(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500500\r\nused_cpu_sys_children:9.000000\r\n"
	got, err := serverCPU(info)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1750500 * time.Microsecond; got != want {
		t.Errorf("serverCPU = %v, want %v (children not counted)", got, want)
	}
}

func TestServerCPURefusesBadReplies(t *testing.T) {
	for _, c := range []struct{ info, want string }{
		{"used_cpu_sys:1.0\r\n", "not both reported"},
		{"used_cpu_sys:1.0\r\nused_cpu_user:lots\r\n", `used_cpu_user is "lots"`},
	} {
		if _, err := serverCPU(c.info); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serverCPU(%q): error %v, want one containing %q", c.info, err, c.want)
		}
	}
}
