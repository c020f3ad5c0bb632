package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A port taken already: the error names the flag (or its variable) and the
// address, and the proxy exits 1.
func TestBindErrorNamesFlag(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-listen", addr, "-metrics-listen", "127.0.0.1:0"}, nil, "-listen " + addr + ": bind: address already in use"},
		{[]string{"-listen", "127.0.0.1:0", "-metrics-listen", addr}, nil, "-metrics-listen " + addr + ": bind: address already in use"},
		{[]string{"-metrics-listen", "127.0.0.1:0"}, map[string]string{"INFERMETRICS_PROXY_LISTEN": addr}, "INFERMETRICS_PROXY_LISTEN=" + addr + ": bind: address already in use"},
	} {
		var out bytes.Buffer
		args := append([]string{"-upstream", "http://127.0.0.1:1"}, c.args...)
		if code := run(context.Background(), args, func(k string) string { return c.env[k] }, &out, &out, nil); code != 1 {
			t.Errorf("%v %v: exit %d, want 1:\n%s", c.args, c.env, code, out.String())
		}
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("%v %v: logs lack %q:\n%s", c.args, c.env, c.want, out.String())
		}
	}
}

// A request its upstream fails to answer gets a 502 whose JSON body, in the
// shape OpenAI's clients read, names the proxy, the upstream and the cause:
// unreachable (nothing listens), or failed to answer (the connection closed
// without an answer, a certificate refused); it carries none of the
// request's credentials, and the request is recorded as before, an error.
func TestUpstreamErrorBody(t *testing.T) {
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downURL := "http://" + down.Addr().String()
	down.Close()
	hungUp := httptest.NewServer(http.HandlerFunc(hangUp))
	defer hungUp.Close()
	untrusted := newTLSUpstream(t, newTestCA(t), false).url(t)
	for _, c := range []struct {
		name, upstream, kind string
		message              []string
	}{
		{"down", downURL, "upstream_unreachable", []string{"infermetrics-proxy: upstream " + downURL + " unreachable: ", "connection refused"}},
		{"hangs up", hungUp.URL, "upstream_error", []string{"infermetrics-proxy: upstream " + hungUp.URL + " failed to answer: ", "EOF"}},
		{"certificate refused", untrusted, "upstream_error", []string{"infermetrics-proxy: upstream " + untrusted + " failed to answer: ", "certificate"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startProxy(t, nil, "-upstream", c.upstream)
			resp, err := http.DefaultClient.Do(credentialRequest(t.Context(), t, p))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %q %v: want 502 application/json", resp.StatusCode, resp.Header.Get("Content-Type"), err)
			}
			var body struct {
				Error struct {
					Message string
					Type    string
					Param   *string
					Code    *string
				}
			}
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatalf("body %q: %v", b, err)
			}
			for _, m := range c.message {
				if !strings.Contains(body.Error.Message, m) {
					t.Errorf("message %q lacks %q", body.Error.Message, m)
				}
			}
			if body.Error.Type != c.kind {
				t.Errorf("type %q, want %q", body.Error.Type, c.kind)
			}
			for _, s := range secrets {
				if strings.Contains(string(b), s) {
					t.Errorf("the body carries %s: %s", s, b)
				}
			}
			wantEnd(t, p, "m", "error", "/v1/chat/completions", "5xx")
		})
	}
}
