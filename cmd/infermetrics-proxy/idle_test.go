package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// closingUpstream closes a keep-alive connection idle longer than idle as
// uvicorn does (vLLM's and SGLang's server), in the worst case: a request
// sent on it as it closes is read and gets no response.
type closingUpstream struct {
	*httptest.Server
	mu    sync.Mutex
	conns int // connections that carried a request (not the proxy's check at start)
}

// connState is a connection's: when its last response ended, and whether
// it carried a request.
type connState struct {
	last time.Time
	used bool
}

type connStateKey struct{}

func newClosingUpstream(t *testing.T, idle time.Duration) *closingUpstream {
	u := &closingUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := r.Context().Value(connStateKey{}).(*connState)
		u.mu.Lock()
		if !st.used {
			st.used = true
			u.conns++
		}
		expired := !st.last.IsZero() && time.Since(st.last) > idle
		u.mu.Unlock()
		if expired {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = c.Close()
			}
			return
		}
		chatJSON(w, r)
		u.mu.Lock()
		st.last = time.Now()
		u.mu.Unlock()
	}))
	u.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connStateKey{}, new(connState))
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// A POST after the upstream's keep-alive timeout goes on a new connection,
// not on the one the upstream closes (a 502 to the client): the proxy's
// idle timeout to its upstreams, -upstream-idle-timeout, is below the
// upstream's (issue 27, item 6).
func TestUpstreamClosesIdleConnections(t *testing.T) {
	t.Parallel()
	const upstreamIdle = 500 * time.Millisecond
	up := newClosingUpstream(t, upstreamIdle)
	p := startProxy(t, nil, "-upstream", up.URL, "-upstream-idle-timeout", "20ms")
	for i := range 2 {
		if i > 0 {
			time.Sleep(upstreamIdle + 200*time.Millisecond)
		}
		if code, body := post(t, p.url("/v1/chat/completions"), []byte(`{"model":"m","messages":[]}`)); code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.conns != 2 {
		t.Errorf("%d connections to the upstream, want 2 (one per request)", up.conns)
	}
}

// By default the proxy keeps idle upstream connections shorter than
// uvicorn's default keep-alive timeout, 5 s (DefaultUpstreamIdleTimeout).
func TestUpstreamIdleTimeoutDefault(t *testing.T) {
	var out bytes.Buffer
	c, err := parseConfig([]string{"-upstream", "http://x"}, func(string) string { return "" }, &out)
	if err != nil {
		t.Fatal(err)
	}
	if got := upstreamTransport(c).IdleConnTimeout; got <= 0 || got >= 5*time.Second {
		t.Errorf("upstream idle timeout %v, want below uvicorn's 5 s", got)
	}
}
