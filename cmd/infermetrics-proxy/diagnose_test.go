package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
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
	down := downURL(t)
	hungUp := httptest.NewServer(http.HandlerFunc(hangUp))
	defer hungUp.Close()
	untrusted := newTLSUpstream(t, newTestCA(t), false).url(t)
	silent, _, _ := silentUpstream(t, false)
	for _, c := range []struct {
		name, upstream, kind string
		message              []string
		args                 []string
	}{
		{"down", down, "upstream_unreachable", []string{"infermetrics-proxy: upstream " + down + " unreachable: ", "connection refused"}, nil},
		{"hangs up", hungUp.URL, "upstream_error", []string{"infermetrics-proxy: upstream " + hungUp.URL + " failed to answer: ", "EOF"}, nil},
		{"certificate refused", untrusted, "upstream_error", []string{"infermetrics-proxy: upstream " + untrusted + " failed to answer: ", "certificate"}, nil},
		{"no headers within -response-header-timeout", silent.URL, "upstream_error",
			[]string{"infermetrics-proxy: upstream " + silent.URL + " failed to answer: net/http: timeout awaiting response headers"}, []string{"-response-header-timeout", "50ms"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startProxy(t, nil, append([]string{"-upstream", c.upstream}, c.args...)...)
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

// An -upstream whose path ends in an API's is warned about with where a
// client's request goes; a bare address and another base path (an
// ingress's prefix) are not.
func TestAPIPathWarning(t *testing.T) {
	for _, c := range []struct{ upstream, client, sent, drop string }{
		{"http://h:8000/v1", "/v1/chat/completions", "http://h:8000/v1/v1/chat/completions", "/v1"},
		{"http://h:8000/v1/", "/v1/chat/completions", "http://h:8000/v1/v1/chat/completions", "/v1"},
		{"decode=http://h:8000/v1", "/v1/chat/completions", "http://h:8000/v1/v1/chat/completions", "/v1"},
		{"https://api.groq.com/openai/v1", "/openai/v1/chat/completions", "https://api.groq.com/openai/v1/openai/v1/chat/completions", "/openai/v1"},
		{"https://generativelanguage.googleapis.com/v1beta/openai", "/v1beta/openai/chat/completions", "https://generativelanguage.googleapis.com/v1beta/openai/v1beta/openai/chat/completions", "/v1beta/openai"},
		{"https://api.z.ai/api/paas/v4", "/api/paas/v4/chat/completions", "https://api.z.ai/api/paas/v4/api/paas/v4/chat/completions", "/api/paas/v4"},
		{"http://h:11434/api", "/api/chat", "http://h:11434/api/api/chat", "/api"},
		{"http://h:8000/v1/chat/completions", "/v1/chat/completions", "http://h:8000/v1/chat/completions/v1/chat/completions", "/v1/chat/completions"},
		{"http://h:8000/v1/embeddings", "/v1/embeddings", "http://h:8000/v1/embeddings/v1/embeddings", "/v1/embeddings"},
	} {
		u, err := parseUpstream(c.upstream)
		if err != nil {
			t.Fatal(err)
		}
		got := apiPathWarning(u)
		for _, want := range []string{
			"-upstream " + c.upstream + " ends in an API path",
			"a client's POST " + c.client + " goes to " + c.sent + ";",
			"drop " + c.drop + " from -upstream if the server serves " + c.drop + " itself",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: %q lacks %q", c.upstream, got, want)
			}
		}
	}
	for _, v := range []string{"http://h:8000", "http://h:8000/", "http://ingress/llama-3", "http://h/vllm", "https://r.openai.azure.com/openai/deployments/gpt-4o"} {
		u, err := parseUpstream(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := apiPathWarning(u); got != "" {
			t.Errorf("%s: warned %q", v, got)
		}
	}
}

// The warning is logged at start, and names the path the upstream then
// receives.
func TestAPIPathWarningLogged(t *testing.T) {
	var mu sync.Mutex
	var got string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.URL.Path
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL+"/v1")
	if code, _ := post(t, p.url("/v1/chat/completions"), []byte(`{"model":"m"}`)); code != http.StatusNotFound {
		t.Errorf("status %d, want the upstream's 404", code)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "a client's POST /v1/chat/completions goes to " + up.URL + got
	if got != "/v1/v1/chat/completions" || !strings.Contains(p.logs.String(), "level=WARN") || !strings.Contains(p.logs.String(), want) {
		t.Errorf("the upstream received %s; logs lack a warning %q:\n%s", got, want, p.logs)
	}
}

// An upstream nothing listens on is logged at warn at start, with its error;
// one that accepts connections is logged reachable. The proxy serves either
// way.
func TestUpstreamCheckedAtStart(t *testing.T) {
	down := downURL(t)
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	p := startProxy(t, nil, "-upstream", down, "-upstream", up.URL)
	waitFor(t, func() (bool, string) {
		logs := p.logs.String()
		return strings.Contains(logs, `level=WARN msg="upstream unreachable at start: its requests are answered 502 until it is up" upstream=`+down+` error="dial tcp `) &&
				strings.Contains(logs, "connection refused") &&
				strings.Contains(logs, `level=INFO msg="upstream reachable" upstream=`+up.URL),
			"logs:\n" + logs
	})
	if strings.Count(p.logs.String(), "unreachable") != 1 {
		t.Errorf("logs:\n%s", p.logs)
	}
	if h := health(p); h != http.StatusOK {
		t.Errorf("/health %d, want 200: the proxy's own health", h)
	}
}

// The check connects where the transport does: to the HTTP proxy the
// environment names for an upstream (shown redacted), else to the
// upstream, on its scheme's port when it names none.
func TestDialAddress(t *testing.T) {
	viaProxy := func(*http.Request) (*url.URL, error) { return url.Parse("http://user:pw@proxy.example:3128") }
	noProxy := func(*http.Request) (*url.URL, error) { return nil, nil }
	for _, c := range []struct {
		upstream  string
		proxy     func(*http.Request) (*url.URL, error)
		addr, via string
	}{
		{"http://h:8000/v1", noProxy, "h:8000", ""},
		{"http://h", nil, "h:80", ""},
		{"https://h/base", noProxy, "h:443", ""},
		{"http://[::1]:8000", noProxy, "[::1]:8000", ""},
		{"https://api.openai.com", viaProxy, "proxy.example:3128", "http://xxxxx@proxy.example:3128"},
	} {
		u, err := url.Parse(c.upstream)
		if err != nil {
			t.Fatal(err)
		}
		if addr, via := dialAddress(u, c.proxy); addr != c.addr || via != c.via {
			t.Errorf("%s: %s via %q, want %s via %q", c.upstream, addr, via, c.addr, c.via)
		}
	}
}

// downURL is the URL of a port nothing listens on: taken, then closed.
func downURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}
