package main

import (
	"strings"
	"testing"

	"github.com/quorumlabs/redlock/redistest"
)

// TestExecOverTLSWithClientCertificates runs the real binary against TLS nodes that ask
// for a client certificate: exec takes the lock and runs the command, with the files given
// by flags or by the environment; nodes shows TLS on and the certificate's expiry; bad files
// and refused nodes are reported with what is wrong.
func TestExecOverTLSWithClientCertificates(t *testing.T) {
	pki := redistest.NewPKIT(t, "test-ca")
	files, err := pki.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	cl := redistest.StartT(t, 3, redistest.Options{TLS: files, Persistence: true})
	nodes := "REDLOCK_NODES=" + strings.Join(cl.URLs(), ",")
	tlsFlags := []string{"--cacert", pki.CAFile, "--cert", files.Client.Cert, "--key", files.Client.Key}

	// Each run is a new process that makes new connections: the node timeout leaves room
	// for their handshakes under -race on a busy machine.
	r := cli{args: append(append([]string{"exec", "--ttl", "10s", "--node-timeout", "1s", "--restart-grace", "off"}, tlsFlags...), "tls-job", "--", "sh", "-c", "echo token=$REDLOCK_TOKEN"), env: []string{nodes}}.run(t)
	if r.code != 0 || !strings.Contains(r.stdout, "token=") || strings.Contains(r.stdout, "token=\n") {
		t.Fatalf("exec with TLS flags: %v", r)
	}
	byEnv := []string{nodes, "REDLOCK_CACERT=" + pki.CAFile, "REDLOCK_CERT=" + files.Client.Cert, "REDLOCK_KEY=" + files.Client.Key}
	r = cli{args: []string{"exec", "--ttl", "10s", "--node-timeout", "1s", "--restart-grace", "off", "tls-job", "--", "true"}, env: byEnv}.run(t)
	if r.code != 0 {
		t.Fatalf("exec with TLS from the environment: %v", r)
	}

	r = cli{args: []string{"nodes", "--ttl", "10s", "--node-timeout", "1s", "--restart-grace", "off"}, env: byEnv}.run(t)
	if r.code != 0 || strings.Count(r.stdout, "1.3 cert until ") != 3 {
		t.Fatalf("nodes: want TLS 1.3 and the certificate's expiry on every node: %v", r)
	}
	t.Logf("nodes:\n%s", r.stdout)
	if !strings.Contains(r.stdout, "expires at") {
		t.Errorf("nodes: no warning about the certificates that expire within a day: %v", r)
	}

	other := redistest.NewPKIT(t, "other-ca")
	cases := []struct {
		name    string
		env     []string
		args    []string
		code    int
		mention []string
	}{
		{"missing CA file", []string{nodes}, []string{"--cacert", "/nonexistent/ca.pem"}, exitUsage,
			[]string{"--cacert", "/nonexistent/ca.pem", "file not found"}},
		{"key without certificate", []string{nodes, "REDLOCK_KEY=" + files.Client.Key}, nil, exitUsage,
			[]string{"REDLOCK_KEY", files.Client.Key, "has no certificate"}},
		{"plain URLs with TLS files", []string{"REDLOCK_NODES=redis://" + cl.Servers[0].Addr}, tlsFlags, exitUsage,
			[]string{"use rediss://"}},
		{"wrong CA", []string{nodes}, []string{"--cacert", other.CAFile, "--cert", files.Client.Cert, "--key", files.Client.Key}, exitUnavailable,
			[]string{"not signed by a trusted CA", "unknown authority"}},
		{"no client certificate", []string{nodes}, []string{"--cacert", pki.CAFile}, exitUnavailable,
			[]string{"requires a client certificate and none was given", "certificate required"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"exec", "-v", "--ttl", "2s", "--wait", "0s", "--restart-grace", "off"}, tc.args...), "tls-job", "--", "true")
			r := cli{args: args, env: tc.env}.run(t)
			if r.code != tc.code {
				t.Fatalf("want exit %d: %v", tc.code, r)
			}
			for _, m := range tc.mention {
				if !strings.Contains(r.stderr, m) {
					t.Errorf("stderr does not say %q: %v", m, r)
				}
			}
			t.Logf("%s: %s", tc.name, firstLine(r.stderr))
		})
	}
}

// firstLine is the first line of s that is not a -v log line.
func firstLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "time=") && line != "" {
			return line
		}
	}
	return ""
}
