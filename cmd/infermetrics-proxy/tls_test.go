package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/internal/testlog"
)

// testCA is a certificate authority of the test's own, and a server
// certificate it signed for localhost.
type testCA struct {
	pemFile string // the CA's certificate, PEM
	server  tls.Certificate
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, srvKey := key(), key()
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "infermetrics test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return testCA{pemFile: file, server: tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}}
}

// tlsUpstream serves chat completions over TLS with the CA's certificate
// for localhost, noting the server name (SNI) and protocol of each request.
type tlsUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	sni    []string
	protos []string
}

func newTLSUpstream(t *testing.T, ca testCA, h2 bool) *tlsUpstream {
	u := &tlsUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.protos = append(u.protos, r.Proto)
		u.mu.Unlock()
		chatJSON(w, r)
	}))
	u.EnableHTTP2 = h2
	// The handshakes a test makes fail (a proxy without the CA), and
	// those Close cuts short, are logged with the test's log, not on
	// stderr.
	u.Config.ErrorLog = log.New(testlog.Writer{T: t}, "upstream: ", 0)
	u.TLS = &tls.Config{Certificates: []tls.Certificate{ca.server}, GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		u.mu.Lock()
		u.sni = append(u.sni, hello.ServerName)
		u.mu.Unlock()
		return nil, nil
	}}
	u.StartTLS()
	t.Cleanup(u.Close)
	return u
}

// url is the upstream's address by host name, as a user gives a hosted
// provider's.
func (u *tlsUpstream) url(t *testing.T) string {
	_, port, err := net.SplitHostPort(u.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return "https://localhost:" + port
}

// An HTTPS upstream works as a user configures it: its certificate checked
// against the system roots and -upstream-ca-file (or
// INFERMETRICS_PROXY_UPSTREAM_CA_FILE), its host name sent as SNI, over
// HTTP/1.1 and HTTP/2; a certificate no root vouches for is refused, a 502
// (issue 27, item 8).
func TestHTTPSUpstream(t *testing.T) {
	ca := newTestCA(t)
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprint("h2=", h2), func(t *testing.T) {
			up := newTLSUpstream(t, ca, h2)
			for _, c := range []struct {
				name string
				env  map[string]string
				args []string
			}{
				{"flag", nil, []string{"-upstream-ca-file", ca.pemFile}},
				{"variable", map[string]string{"INFERMETRICS_PROXY_UPSTREAM_CA_FILE": ca.pemFile}, nil},
			} {
				p := startProxy(t, c.env, append([]string{"-upstream", up.url(t)}, c.args...)...)
				code, body := post(t, p.url("/v1/chat/completions"), []byte(`{"model":"m","messages":[]}`))
				if code != http.StatusOK || !strings.Contains(string(body), `"finish_reason":"stop"`) {
					t.Fatalf("%s: %d %s\n%s", c.name, code, body, p.logs)
				}
				waitFor(t, func() (bool, string) {
					v, _ := value(p.scrape(t), "vllm:request_success_total", "model_name", "m", "finished_reason", "stop")
					return v == 1, fmt.Sprintf("%s: requests recorded %v", c.name, v)
				})
			}
			up.mu.Lock()
			sni, protos := up.sni, up.protos
			up.mu.Unlock()
			want := "HTTP/1.1"
			if h2 {
				want = "HTTP/2.0"
			}
			for _, s := range sni {
				if s != "localhost" {
					t.Errorf("server name %q, want localhost", s)
				}
			}
			for _, proto := range protos {
				if proto != want {
					t.Errorf("protocol %s, want %s", proto, want)
				}
			}
			if len(sni) == 0 || len(protos) != 2 {
				t.Errorf("%d handshakes, %d requests", len(sni), len(protos))
			}

			// Without the CA the upstream's certificate is refused.
			p := startProxy(t, nil, "-upstream", up.url(t))
			if code, _ := post(t, p.url("/v1/chat/completions"), []byte(`{"model":"m","messages":[]}`)); code != http.StatusBadGateway {
				t.Errorf("without the CA: %d, want 502", code)
			}
			if !strings.Contains(p.logs.String(), "certificate") {
				t.Errorf("the log does not say why:\n%s", p.logs)
			}
		})
	}
}

// A CA file that cannot be read, or holds no certificate, is a
// configuration error (exit 2), not a proxy that trusts nothing it adds.
func TestUpstreamCAFileErrors(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("no certificate here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, why := range map[string]string{filepath.Join(t.TempDir(), "missing.pem"): "no such file", empty: "no PEM certificate"} {
		var out strings.Builder
		code := run(t.Context(), []string{"-upstream", "https://localhost:1", "-upstream-ca-file", file}, func(string) string { return "" }, &out, &out, nil)
		if code != 2 || !strings.Contains(out.String(), why) {
			t.Errorf("%s: exit %d, %q, want %q", file, code, out.String(), why)
		}
	}
}
