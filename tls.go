package redlock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// TLSFiles names the PEM files of a TLS connection to the nodes, as
// redis-cli's --cacert, --cert, --key and --sni do. Every field is optional.
type TLSFiles struct {
	// CACert is a bundle of the CA certificates that sign the nodes'
	// certificates. Empty: the system's roots.
	CACert string
	// Cert and Key are the client certificate and its private key, for
	// nodes that ask for one (tls-auth-clients yes). Both or neither.
	Cert, Key string
	// ServerName is the name the node's certificate must be valid for,
	// instead of the host of its URL (SNI as well).
	ServerName string
}

// The query parameters of a rediss:// node URL that name TLS files. They
// take redis-cli's flag names: one vocabulary for the library, the CLI and
// redis-cli.
const (
	urlCACert = "cacert"
	urlCert   = "cert"
	urlKey    = "key"
	urlSNI    = "sni"
)

// LoadTLSConfig reads the files and returns a TLS configuration that
// trusts the CA bundle (or the system roots) and presents the client
// certificate. Bad files fail here, each with a *ConfigError naming the
// file: not found or unreadable, no PEM certificate in it, a key that does
// not match the certificate, a certificate expired or not yet valid.
func LoadTLSConfig(files TLSFiles) (*tls.Config, error) {
	return files.apply(&tls.Config{MinVersion: tls.VersionTLS12}, time.Now())
}

// apply loads the files into a copy of base.
func (f TLSFiles) apply(base *tls.Config, now time.Time) (*tls.Config, error) {
	cfg := base.Clone()
	if f.CACert != "" {
		pool, err := loadCABundle(f.CACert, now)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key == "":
		return nil, configErr("TLS client certificate", f.Cert, "has no key: give the key file too (key, --key)")
	case f.Key != "" && f.Cert == "":
		return nil, configErr("TLS client key", f.Key, "has no certificate: give the certificate file too (cert, --cert)")
	case f.Cert != "":
		pair, err := loadKeyPair(f.Cert, f.Key, now)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if f.ServerName != "" {
		cfg.ServerName = f.ServerName
	}
	return cfg, nil
}

// readPEM reads a PEM file, with an error naming it for what is wrong.
func readPEM(field, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &ConfigError{Field: field, Value: path, Reason: "file not found", Err: err}
	case err != nil:
		return nil, &ConfigError{Field: field, Value: path, Reason: "cannot be read: " + err.Error(), Err: err}
	}
	if block, _ := pem.Decode(data); block == nil {
		return nil, configErr(field, path, "is not a PEM file (no -----BEGIN line)")
	}
	return data, nil
}

// loadCABundle reads the CA certificates in path. A bundle in which not one
// certificate is valid now cannot verify any node: refused here rather than
// by every handshake.
func loadCABundle(path string, now time.Time) (*x509.CertPool, error) {
	const field = "TLS CA file"
	data, err := readPEM(field, path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, &ConfigError{Field: field, Value: path, Reason: "holds a certificate that cannot be parsed: " + err.Error(), Err: err}
		}
		pool.AddCert(cert)
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, configErr(field, path, "holds no CERTIFICATE block")
	}
	var problems []string
	for _, cert := range certs {
		problem := validityProblem(cert, now)
		if problem == "" {
			return pool, nil
		}
		problems = append(problems, problem)
	}
	return nil, configErr(field, path, "holds no certificate valid now: "+strings.Join(problems, "; "))
}

// loadKeyPair reads a client certificate and its key.
func loadKeyPair(certPath, keyPath string, now time.Time) (tls.Certificate, error) {
	certPEM, err := readPEM("TLS client certificate", certPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readPEM("TLS client key", keyPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		reason := strings.TrimPrefix(err.Error(), "tls: ")
		if strings.Contains(reason, "does not match") {
			reason = "does not match the certificate " + certPath
		}
		return tls.Certificate{}, &ConfigError{Field: "TLS client key", Value: keyPath, Reason: reason, Err: err}
	}
	if problem := validityProblem(pair.Leaf, now); problem != "" {
		return tls.Certificate{}, configErr("TLS client certificate", certPath, problem)
	}
	return pair, nil
}

// validityProblem says why cert is not valid at now, or "".
func validityProblem(cert *x509.Certificate, now time.Time) string {
	name := cert.Subject.CommonName
	if name == "" {
		name = cert.Subject.String()
	}
	switch {
	case now.After(cert.NotAfter):
		return fmt.Sprintf("certificate %q expired at %s", name, cert.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(cert.NotBefore):
		return fmt.Sprintf("certificate %q is not valid before %s", name, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return ""
}

// tlsFilesOf takes the TLS parameters out of a node URL's query, so that
// go-redis, which refuses parameters it does not know, gets the rest.
func tlsFilesOf(u *url.URL) (TLSFiles, bool) {
	q := u.Query()
	f := TLSFiles{CACert: q.Get(urlCACert), Cert: q.Get(urlCert), Key: q.Get(urlKey), ServerName: q.Get(urlSNI)}
	found := false
	for _, k := range []string{urlCACert, urlCert, urlKey, urlSNI} {
		if q.Has(k) {
			found = true
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return f, found
}

// nodeTLS is what the last connection made to a node showed of TLS.
type nodeTLS struct {
	version     uint16
	certExpires time.Time // the node's own certificate's NotAfter
	certSubject string
}

// tlsWatch is a go-redis hook that records the TLS state of every new
// connection to the node, for Nodes: whether the connection is encrypted and
// when the node's certificate expires. It reads the state of the
// connection the dialer returns, so it works with user-built clients and
// their own dialers too, as long as the connection reports its TLS state.
type tlsWatch struct{ n *node }

// tlsConn is a connection that can tell its TLS state (*tls.Conn).
type tlsConn interface {
	ConnectionState() tls.ConnectionState
}

func (h tlsWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return conn, tlsDialError(err)
		}
		st := &nodeTLS{}
		if tc, ok := conn.(tlsConn); ok {
			cs := tc.ConnectionState()
			st.version = cs.Version
			if len(cs.PeerCertificates) > 0 {
				st.certExpires = cs.PeerCertificates[0].NotAfter
				st.certSubject = cs.PeerCertificates[0].Subject.CommonName
			}
		}
		h.n.tls.Store(st)
		return conn, nil
	}
}

// ProcessHook explains a command that failed because the node refused our
// certificate: with TLS 1.3 the client learns that only when it reads the
// first reply, not from the handshake.
func (tlsWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			explainRefusal(cmd)
		}
		return err
	}
}

// ProcessPipelineHook is ProcessHook for pipelines.
func (tlsWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil {
			for _, cmd := range cmds {
				explainRefusal(cmd)
			}
		}
		return err
	}
}

// explainRefusal adds to cmd's error what a TLS alert from the node means.
func explainRefusal(cmd redis.Cmder) {
	var op *net.OpError
	if err := cmd.Err(); errors.As(err, &op) && op.Op == "remote error" && !strings.HasPrefix(err.Error(), "TLS: ") {
		if strings.Contains(err.Error(), "certificate required") {
			// The node asks every client for a certificate, and none was given.
			cmd.SetErr(fmt.Errorf("TLS: the node requires a client certificate and none was given (cert and key, --cert and --key): %w", err))
			return
		}
		cmd.SetErr(fmt.Errorf("TLS: the node refused this client's certificate (cert and key, --cert and --key): %w", err))
	}
}

// tlsDialError explains a refused handshake: the bare x509 messages do not
// say which side refused what, nor what to change.
func tlsDialError(err error) error {
	var verr *tls.CertificateVerificationError
	if !errors.As(err, &verr) {
		return err
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	hint := ""
	switch {
	case errors.As(err, &unknown):
		hint = "the node's certificate is not signed by a trusted CA (cacert, --cacert)"
	case errors.As(err, &hostname):
		hint = "the node's certificate is for another host (sni, --sni, names the host it must be valid for)"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		hint = "the node's certificate has expired, or is not valid yet"
	default:
		hint = "the node's certificate was refused"
	}
	return fmt.Errorf("TLS handshake: %s: %w", hint, err)
}
