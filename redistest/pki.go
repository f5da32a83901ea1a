package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a private certificate authority for tests: it issues server and
// client certificates as PEM files in its directory. Keys are ECDSA P-256
// and signatures SHA-256, which Go allows under GODEBUG=fips140=only.
type PKI struct {
	Dir    string // where the files are written
	CAFile string // the CA's certificate, PEM

	ca  *x509.Certificate
	key *ecdsa.PrivateKey
}

// CertFiles are a certificate and its key, PEM files.
type CertFiles struct {
	Cert, Key string
}

// CertSpec describes a certificate to issue.
type CertSpec struct {
	// Name is the file name stem and the certificate's common name.
	Name string
	// Hosts are the IP addresses and DNS names a server certificate is
	// valid for. Empty for a client certificate.
	Hosts []string
	// Client makes a client certificate (and also a server one if Hosts
	// are given).
	Client bool
	// NotBefore and NotAfter bound the validity. Zero: from an hour ago to
	// a day from now. An expired certificate: NotAfter in the past.
	NotBefore, NotAfter time.Time
}

// NewPKI makes a CA in dir, with its certificate in dir/<name>.pem.
func NewPKI(dir, name string) (*PKI, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("redistest: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"redistest"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("redistest: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("redistest: CA certificate: %w", err)
	}
	p := &PKI{Dir: dir, CAFile: filepath.Join(dir, name+".pem"), ca: ca, key: key}
	if err := writePEM(p.CAFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return p, nil
}

// NewPKIT is NewPKI in a test's temp dir; it fails tb on error.
func NewPKIT(tb testing.TB, name string) *PKI {
	tb.Helper()
	p, err := NewPKI(tb.TempDir(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Issue signs a certificate for spec with the CA and writes it and its key
// to Dir/<Name>.pem and Dir/<Name>-key.pem.
func (p *PKI) Issue(spec CertSpec) (CertFiles, error) {
	if spec.Name == "" {
		return CertFiles{}, errors.New("redistest: a certificate needs a Name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CertFiles{}, fmt.Errorf("redistest: key for %s: %w", spec.Name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: spec.Name, Organization: []string{"redistest"}},
		NotBefore:    spec.NotBefore,
		NotAfter:     spec.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = now.Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = now.Add(24 * time.Hour)
	}
	for _, h := range spec.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if len(spec.Hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		return CertFiles{}, fmt.Errorf("redistest: certificate %s: %w", spec.Name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return CertFiles{}, fmt.Errorf("redistest: key for %s: %w", spec.Name, err)
	}
	f := CertFiles{Cert: filepath.Join(p.Dir, spec.Name+".pem"), Key: filepath.Join(p.Dir, spec.Name+"-key.pem")}
	if err := writePEM(f.Cert, "CERTIFICATE", der); err != nil {
		return CertFiles{}, err
	}
	if err := writePEM(f.Key, "PRIVATE KEY", keyDER); err != nil {
		return CertFiles{}, err
	}
	return f, nil
}

// IssueT is Issue for tests; it fails tb on error.
func (p *PKI) IssueT(tb testing.TB, spec CertSpec) CertFiles {
	tb.Helper()
	f, err := p.Issue(spec)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// ServerTLS issues a loopback server certificate and a client certificate
// and returns the TLS options of nodes that serve with the one and ask
// clients for a certificate, which the helper's own client presents.
func (p *PKI) ServerTLS() (*TLS, error) {
	server, err := p.Issue(CertSpec{Name: "server", Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		return nil, err
	}
	client, err := p.Issue(CertSpec{Name: "client", Client: true})
	if err != nil {
		return nil, err
	}
	return &TLS{CAFile: p.CAFile, Server: server, Client: client}, nil
}

// serial is a random positive serial number: crypto/rand.Int cannot fail
// since Go 1.24 (the reader crashes the program instead).
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

func writePEM(path, kind string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("redistest: writing %s: %w", path, err)
	}
	return nil
}
