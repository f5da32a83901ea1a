package chaos

import (
	"crypto/tls"
	"fmt"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// clusterTLS makes, in dir, a CA, a server certificate for 127.0.0.1 (where
// this process reaches the nodes and their proxies) and a client
// certificate, and returns the nodes' files and the clients' configuration:
// it trusts only that CA and presents the client certificate, which the
// nodes require. TLS only encrypts the bytes that toxiproxy forwards: every
// network fault applies as it does to plain TCP.
func clusterTLS(dir string) (*redistest.TLS, *tls.Config, error) {
	pki, err := redistest.NewPKI(dir, "chaos-ca")
	if err != nil {
		return nil, nil, err
	}
	files, err := pki.ServerTLS()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := redlock.LoadTLSConfig(redlock.TLSFiles{CACert: files.CAFile, Cert: files.Client.Cert, Key: files.Client.Key})
	if err != nil {
		return nil, nil, fmt.Errorf("chaos: the run's own TLS files: %w", err)
	}
	return files, cfg, nil
}

// tlsNode is a node that serves TLS.
type tlsNode interface {
	TLSConfig() *tls.Config
}

// nodeTLS is the client configuration to reach n with: nil for plain TCP.
func nodeTLS(n Node) *tls.Config {
	if t, ok := n.(tlsNode); ok {
		return t.TLSConfig()
	}
	return nil
}

// tlsScenarios are the scenarios that run again with TLS between the
// clients and the lock nodes, client certificates required: the control,
// a partition and a crash-restart, which reconnects every client.
func tlsScenarios(table []Scenario) []Scenario {
	var out []Scenario
	for _, sc := range table {
		switch sc.Name {
		case "no-faults", "partition-minority", "restart-aof":
			sc.Name += "-tls"
			sc.About += "; over TLS with client certificates"
			sc.TLS = true
			out = append(out, sc)
		}
	}
	return out
}
