package redistest

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Every build runs, says the version LookupServer reported, and takes a
// clock fault: the matrix depends on all three.
func TestEveryServerBuildServesAndMovesItsClock(t *testing.T) {
	for _, name := range ServerNames {
		t.Run(name, func(t *testing.T) {
			c := StartT(t, 1, Options{Server: name, FakeTime: true})
			b := c.Build
			if b.Name != name {
				t.Fatalf("Build.Name = %q, want %q", b.Name, name)
			}
			info, err := c.Servers[0].Client().Info(ctxT(t, 5*time.Second), "server").Result()
			if err != nil {
				t.Fatal(err)
			}
			fields := parseFields(info)
			// Valkey keeps redis_version for old clients (at 7.2.4) and
			// gives its own in valkey_version.
			if got := fields[b.Product+"_version"]; got != b.Version {
				t.Errorf("INFO server %s_version = %q; LookupServer said %s", b.Product, got, b)
			}
			wantPrefix := map[string]string{Redis86: "8.6.", Valkey91: "9.1."}[name]
			if !strings.HasPrefix(b.Version, wantPrefix) {
				t.Errorf("%s runs version %s", name, b.Version)
			}
			if err := c.Servers[0].SetClockOffset(time.Hour); err != nil {
				t.Fatal(err)
			}
			if lo, _ := clockSkew(t, c.Servers[0].Client()); lo < time.Hour-time.Second {
				t.Errorf("after SetClockOffset(1h) the node's clock is %v ahead", lo)
			}
		})
	}
}

func TestUnknownServerNameIsAnError(t *testing.T) {
	_, err := Start(1, Options{Server: "redis-6.2"})
	if err == nil || !strings.Contains(err.Error(), `"redis-6.2"`) || !strings.Contains(err.Error(), Valkey91) {
		t.Fatalf("Start with an unknown server: %v; want an error naming it and the known ones", err)
	}
	t.Setenv(ServerEnv, "keydb")
	if _, err := Start(1, Options{}); err == nil || !strings.Contains(err.Error(), `"keydb"`) {
		t.Fatalf("Start with %s=keydb: %v; want an error naming it", ServerEnv, err)
	}
}

// A build asked for and not installed fails the start with an error that
// says how to install it; nothing in the helpers turns it into a skip.
func TestMissingServerBuildIsAnError(t *testing.T) {
	t.Setenv("REDLOCK_SERVERS_DIR", t.TempDir())
	_, err := Start(1, Options{Server: Valkey91})
	if !errors.Is(err, ErrServerMissing) || !strings.Contains(err.Error(), "make servers") {
		t.Fatalf("Start of a missing build: %v; want ErrServerMissing, saying to run make servers", err)
	}
}

func TestServerEnvChoosesTheBuild(t *testing.T) {
	t.Setenv(ServerEnv, Valkey91)
	if got := SelectedServer(); got != Valkey91 {
		t.Fatalf("SelectedServer() = %q with %s=%s", got, ServerEnv, Valkey91)
	}
	c := StartT(t, 1, Options{})
	if c.Build.Name != Valkey91 || c.Servers[0].Build().Product != "valkey" {
		t.Fatalf("with %s=%s the cluster runs %s", ServerEnv, Valkey91, c.Build)
	}
	t.Setenv(ServerEnv, "")
	if got := SelectedServer(); got != Redis70 {
		t.Fatalf("SelectedServer() = %q with %s unset; want %s", got, ServerEnv, Redis70)
	}
}

func TestParseVersion(t *testing.T) {
	for out, want := range map[string][2]string{
		"Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1\n": {"redis", "7.0.15"},
		"Valkey server v=9.1.2 sha=00000000:0 malloc=jemalloc-5.3.1 bits=64 build=9\n": {"valkey", "9.1.2"},
	} {
		p, v, err := parseVersion(out)
		if err != nil || p != want[0] || v != want[1] {
			t.Errorf("parseVersion(%q) = %q, %q, %v; want %q, %q", out, p, v, err, want[0], want[1])
		}
	}
	if _, _, err := parseVersion("redis-server: command not found"); err == nil {
		t.Error("parseVersion of garbage: no error")
	}
}
