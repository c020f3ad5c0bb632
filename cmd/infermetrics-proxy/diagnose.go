package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/infermetrics/infermetrics/openaihttp"
)

// Error types of the proxy's own 502 answers: the upstream could not be
// connected to (refused, no such host, no route), or it failed once
// connected (closed the connection, a TLS error, -response-header-timeout).
const (
	errUpstreamUnreachable = "upstream_unreachable"
	errUpstreamFailed      = "upstream_error"
)

// upstreamErrorBody is the body of the 502 answered for a request its
// upstream failed to answer, in the shape OpenAI's API and vLLM give an
// error, which OpenAI's clients read ({"error": {"message": ..., "type":
// ...}}): the message names the proxy, the upstream and the cause,
// redacted as the proxy's errors are (redact).
func upstreamErrorBody(u upstream, err error) []byte {
	kind, what := errUpstreamFailed, "failed to answer"
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" && op.Err != nil {
		kind, what, err = errUpstreamUnreachable, "unreachable", op.Err
	}
	type apiError struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{apiError{Message: redact(fmt.Sprintf("infermetrics-proxy: upstream %s %s: %v", u.url.Redacted(), what, err)), Type: kind}})
	return append(b, '\n')
}

// writeUpstreamError answers 502 with upstreamErrorBody.
func writeUpstreamError(w http.ResponseWriter, u upstream, err error) {
	body := upstreamErrorBody(u, err)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusBadGateway)
	_, _ = w.Write(body)
}

// apiPathWarning is the warning for an upstream whose path ends in an
// API's (apiPath), "" for any other. The proxy puts each client's path
// after the upstream's, so a client that keeps the base path it used with
// the server (http://proxy:8787/v1) sends it twice (/v1/v1/...): the
// warning says where a client's request goes. Some upstreams want a base
// path (a provider's, an ingress's prefix): a warning, not an error.
func apiPathWarning(u upstream) string {
	base := strings.TrimRight(u.url.Path, "/")
	if !apiPath(base) {
		return ""
	}
	client := base + "/chat/completions"
	switch {
	case recordedPath(base):
		client = base
	case path.Base(base) == "api": // Ollama's native API
		client = base + "/chat"
	}
	// The URL rewrite sends it to: SetURL, as rewrite calls it.
	out := &http.Request{URL: &url.URL{Path: client}, Header: http.Header{}}
	(&httputil.ProxyRequest{In: out, Out: out}).SetURL(u.url)
	return fmt.Sprintf("-upstream %s ends in an API path: a client's POST %s goes to %s; drop %s from -upstream if the server serves %s itself",
		redact(u.String()), client, redact(out.URL.String()), base, base)
}

// apiPath reports a path whose last segment is an API version (v1,
// v1beta, v4), api or openai (Ollama's, OpenRouter's, Groq's, Gemini's
// base paths), or that ends in a path openaihttp records.
func apiPath(p string) bool {
	last := path.Base(p)
	switch {
	case p == "" || p == "/":
		return false
	case last == "api" || last == "openai":
		return true
	case len(last) > 1 && last[0] == 'v' && last[1] >= '0' && last[1] <= '9':
		return true
	}
	return recordedPath(p)
}

// recordedPath reports a path that ends in one of openaihttp's recorded
// paths, as whole segments.
func recordedPath(p string) bool {
	for _, r := range openaihttp.RecordedPaths() {
		if strings.HasSuffix(p, r) {
			return true
		}
	}
	return false
}

// upstreamCheckTimeout bounds the connection tried to each upstream at
// start.
const upstreamCheckTimeout = 5 * time.Second

// checkUpstreams tries a TCP connection to each upstream, once, at start
// (dialAddress), and logs at warn each it cannot reach: a wrong address or
// a server not up shows when the proxy starts, not at a client's first
// 502. It is a hint, not a gate: the proxy serves either way, and /health
// stays the proxy's own. It returns once every try is done or ctx is.
func checkUpstreams(ctx context.Context, ups upstreams, proxy func(*http.Request) (*url.URL, error), log *slog.Logger) {
	var wg sync.WaitGroup
	for _, u := range ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr, via := dialAddress(u.url, proxy)
			attrs := []any{"upstream", redact(u.String())}
			if via != "" {
				attrs = append(attrs, "via_proxy", via)
			}
			dctx, cancel := context.WithTimeout(ctx, upstreamCheckTimeout)
			defer cancel()
			var d net.Dialer
			conn, err := d.DialContext(dctx, "tcp", addr)
			switch {
			case err == nil:
				conn.Close()
				log.Info("upstream reachable", attrs...)
			case ctx.Err() != nil: // stopping: the try says nothing of the upstream
			default:
				log.Warn("upstream unreachable at start: its requests are answered 502 until it is up", append(attrs, "error", redact(err.Error()))...)
			}
		}()
	}
	wg.Wait()
}

// dialAddress is the host:port the transport connects to for u: u's (its
// scheme's port when it names none), or, when proxy (the transport's
// Proxy: HTTPS_PROXY and the like) names an HTTP proxy for u, the proxy's,
// then also returned, redacted, as via.
func dialAddress(u *url.URL, proxy func(*http.Request) (*url.URL, error)) (addr, via string) {
	target := u
	if proxy != nil {
		if p, err := proxy(&http.Request{URL: u}); err == nil && p != nil {
			target, via = p, redact(p.String())
		}
	}
	port := target.Port()
	if port == "" {
		switch target.Scheme {
		case "https":
			port = "443"
		case "socks5", "socks5h":
			port = "1080"
		default:
			port = "80"
		}
	}
	return net.JoinHostPort(target.Hostname(), port), via
}
