package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"strings"

	"github.com/quorumlabs/redlock"
)

// tlsFlags are redis-cli's TLS flags. Each has an environment variable beside
// REDLOCK_NODES, used when the flag is not given.
type tlsFlags struct {
	cacert, cert, key, sni string
}

func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cacert, "cacert", "", "PEM `file` of the CA certificates that sign the nodes' certificates, for rediss:// nodes (default $REDLOCK_CACERT, else the system roots)")
	fs.StringVar(&f.cert, "cert", "", "PEM `file` of the client certificate for nodes that ask for one (default $REDLOCK_CERT)")
	fs.StringVar(&f.key, "key", "", "PEM `file` of the client certificate's private key (default $REDLOCK_KEY)")
	fs.StringVar(&f.sni, "sni", "", "server `name` the nodes' certificates must be valid for, instead of each URL's host (default $REDLOCK_SNI)")
}

// config loads the TLS files the flags, or in their absence the environment, name: nil if
// none is named. A bad file is an error that names the file and where it was given.
func (f *tlsFlags) config(a *app) (*tls.Config, error) {
	var sources []string
	pick := func(flagValue, flagName, env string) string {
		switch {
		case flagValue != "":
			sources = append(sources, "--"+flagName)
			return flagValue
		case a.getenv(env) != "":
			sources = append(sources, env)
			return a.getenv(env)
		}
		return ""
	}
	files := redlock.TLSFiles{
		CACert:     pick(f.cacert, "cacert", "REDLOCK_CACERT"),
		Cert:       pick(f.cert, "cert", "REDLOCK_CERT"),
		Key:        pick(f.key, "key", "REDLOCK_KEY"),
		ServerName: pick(f.sni, "sni", "REDLOCK_SNI"),
	}
	if len(sources) == 0 {
		return nil, nil
	}
	cfg, err := redlock.LoadTLSConfig(files)
	if err != nil {
		return nil, fmt.Errorf("TLS files given by %s: %w", strings.Join(sources, ", "), err)
	}
	return cfg, nil
}
