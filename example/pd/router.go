package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// router is a P/D proxy in the shape of vLLM's disaggregated serving proxy
// (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py): for each
// client request it runs the prefill leg on the prefill instance (not
// streamed, max_tokens 1, kv_transfer_params asking for a remote decode),
// then sends the client's request with the returned kv_transfer_params to
// the decode instance and passes the decode leg's response through, chunk
// by chunk (chat and text completions, and Anthropic messages). The
// client's usage comes from the decode leg, whose cached_tokens count, as
// vLLM's do, every prompt token the decode engine did not compute (a
// remote-prefill request reaches its first scheduling with its local
// prefix-cache hits and the transferred tokens computed, less the last one:
// Scheduler._update_waiting_for_remote_kv), or with -cached-tokens prefill,
// as vLLM's since PR #54222, the prefill instance's own count, which the
// prefill leg's kv_transfer_params carry (remote_prefill_cached_tokens) and
// the router passes on unchanged. The router records the prompt's sources
// from the prefill leg either way (openaihttp.Trace.PrefillCached): the
// prefill instance's cache hits as local_cache_hit, the rest local_compute.
type router struct {
	prefill, decode upstream
	client          *http.Client // the legs, recorded by openaihttp
	plain           *http.Client // GET /v1/models, not a completion
	// handoffDelay is how long it waits between the legs (-handoff-delay).
	handoffDelay time.Duration
}

// upstream is an instance the router sends legs to: its base URL, and the
// backend (name and role) its legs are recorded for.
type upstream struct {
	base    string
	backend openaihttp.Backend
}

// maxLegBytes bounds a prefill leg's response, which the router reads whole.
const maxLegBytes = 8 << 20

// routerRole is the router's role attribute, beside the instances' roles.
const routerRole role = "router"

// newRouter returns a router in front of the two instances whose legs are
// recorded on eng (the GenAI client metrics by backend, and each leg in
// the client request's openaihttp.Trace).
func newRouter(prefill, decode *instance, eng *instrument.Engine, handoffDelay time.Duration) *router {
	transport := openaihttp.NewTransport(routerTransport(), openaihttp.WithEngine(eng))
	return &router{
		prefill:      upstream{prefill.base(), openaihttp.Backend{Name: prefill.role.id(), Role: instrument.RolePrefill}},
		decode:       upstream{decode.base(), openaihttp.Backend{Name: decode.role.id(), Role: instrument.RoleDecode}},
		client:       &http.Client{Transport: transport},
		plain:        &http.Client{Transport: routerTransport()},
		handoffDelay: handoffDelay,
	}
}

// routerTransport is the base transport of both legs.
func routerTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64 // every request opens one connection per instance
	return t
}

// handler serves the router's endpoints. GET /v1/models passes the
// decode instance's list on; other paths are 404 (405 for a served path
// asked with another method). newRouterServer wraps it with
// openaihttp.NewHandler.
func (rt *router) handler() http.Handler {
	mux := http.NewServeMux()
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/messages"} {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) { rt.serve(w, r, path) })
	}
	mux.HandleFunc("GET /v1/models", rt.models)
	return withNotFound(mux)
}

// routerServer is the P/D router as a server of the deployment, like an
// instance: its own MeterProvider, service.instance.id router-0, role
// attribute router, /metrics, and a Recorder fed by openaihttp only (a
// front end: no engine step is ever recorded on it), beside its API.
type routerServer struct {
	provider *exporters.Provider
	server   *http.Server
	listener net.Listener
}

// newRouterServer listens on addr and builds the router's metrics and API
// in front of the two instances; setup are the Setup options the instances
// get too (OTLP, stats log), handoffDelay the wait between the legs
// (-handoff-delay), recorder more Recorder options (tests: an error
// collector).
func newRouterServer(ctx context.Context, addr, model string, setup []exporters.Option, prefill, decode *instance,
	handoffDelay time.Duration, recorder ...instrument.Option) (*routerServer, error) {
	provider, err := exporters.Setup(ctx, append(routerRole.resource(), setup...)...)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	rec, err := instrument.NewRecorder(append([]instrument.Option{
		instrument.WithMeterProvider(provider.MeterProvider()),
		instrument.WithModelName(model),
		instrument.WithAttributes(attribute.String("role", string(routerRole))),
	}, recorder...)...)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("router: %w", err), provider.Shutdown(ctx))
	}
	eng, _ := rec.Engine(0) // the Recorder's default rank: never an error
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("router: %w", err), provider.Shutdown(ctx))
	}
	// Each client request is recorded on eng as the client saw it
	// (openaihttp.NewHandler): TTFT from arrival at the router, e2e, the
	// usage it forwards (prompt tokens once, the cached ones the prefill
	// leg reported as local_cache_hit), the P/D leg families, and every
	// request but /metrics in the HTTP families of vLLM's API server.
	handler := withHTTPMetrics(provider.Handler(), newRouter(prefill, decode, eng, handoffDelay).handler(), eng, openaihttp.WithEngine(eng))
	return &routerServer{provider: provider, listener: l,
		server: &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// base is the router's base URL, of /metrics and /v1.
func (rs *routerServer) base() string { return "http://" + rs.listener.Addr().String() }

// url is the address of the router's /metrics endpoint.
func (rs *routerServer) url() string { return rs.base() + "/metrics" }

// serve serves the router until shutdown.
func (rs *routerServer) serve() error {
	if err := rs.server.Serve(rs.listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// shutdown stops the listener, waiting for the requests in flight (each
// records at its end), then flushes the metrics.
func (rs *routerServer) shutdown(ctx context.Context) error {
	err := rs.server.Shutdown(ctx)
	return errors.Join(err, rs.provider.Shutdown(ctx))
}

// serve proxies one request: the prefill leg, then the decode leg streamed
// to the client. The legs carry the client's context, so a client that
// disconnects cancels them (and the instances abort the request).
func (rt *router) serve(w http.ResponseWriter, r *http.Request, path string) {
	// Errors in the shape of the client's API.
	fail := writeError
	if path == "/v1/messages" {
		fail = writeAnthropicError
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		fail(w, badRequest("reading the request: %v", err))
		return
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil || req == nil {
		fail(w, badRequest("the request body is not a JSON object"))
		return
	}
	// Both legs carry one request id, as vLLM's proxy sends X-Request-Id.
	id := requestID(r)

	resp, err := rt.post(r.Context(), rt.prefill, path, id, prefillLeg(req))
	if err != nil {
		writeLegError(w, r, fail, "prefill", err)
		return
	}
	params, err := readPrefill(resp)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.status != http.StatusBadGateway {
			fail(w, ae) // the prefill instance's answer, passed on
		} else {
			writeLegError(w, r, fail, "prefill", err)
		}
		return
	}
	if params != nil {
		req["kv_transfer_params"] = params
	}
	if rt.handoffDelay > 0 {
		select {
		case <-time.After(rt.handoffDelay):
		case <-r.Context().Done():
			return // the client is gone
		}
	}

	resp, err = rt.post(r.Context(), rt.decode, path, id, req)
	if err != nil {
		writeLegError(w, r, fail, "decode", err)
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Cache-Control"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	relay(w, resp.Body)
}

// prefillLeg is the prefill leg's request, as vLLM's proxy makes it: not
// streamed, one output token, the KV kept for a remote decode.
func prefillLeg(req map[string]json.RawMessage) map[string]json.RawMessage {
	leg := make(map[string]json.RawMessage, len(req)+3)
	for k, v := range req {
		leg[k] = v
	}
	leg["kv_transfer_params"] = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,` +
		`"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
	leg["stream"] = json.RawMessage("false")
	leg["max_tokens"] = json.RawMessage("1")
	if _, ok := leg["max_completion_tokens"]; ok {
		leg["max_completion_tokens"] = json.RawMessage("1")
	}
	for _, k := range []string{"stream_options", "min_tokens", "min_completion_tokens"} {
		delete(leg, k)
	}
	return leg
}

// post sends a leg to an instance's path, recorded for its backend.
func (rt *router) post(ctx context.Context, to upstream, path, id string, body map[string]json.RawMessage) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	ctx = openaihttp.ContextWithBackend(ctx, to.backend)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, to.base+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	return rt.client.Do(req)
}

// readPrefill reads the prefill leg's response and returns its
// kv_transfer_params (nil when it has none: the decode instance then
// computes the prompt itself). A status other than 200 comes back as an
// *apiError carrying the instance's status and message.
func readPrefill(resp *http.Response) (json.RawMessage, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLegBytes))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
			e.Error.Message = fmt.Sprintf("prefill instance: %s", resp.Status)
		}
		return nil, &apiError{resp.StatusCode, e.Error.Message}
	}
	var out struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, &apiError{http.StatusBadGateway, "prefill instance: the response is not JSON"}
	}
	if string(out.KVTransferParams) == "null" {
		return nil, nil
	}
	return out.KVTransferParams, nil
}

// writeLegError answers a leg that failed with 502, unless the client is
// gone (its context canceled the leg) and nobody reads the answer.
func writeLegError(w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, error), leg string, err error) {
	if r.Context().Err() != nil {
		return
	}
	fail(w, &apiError{http.StatusBadGateway, fmt.Sprintf("%s leg: %v", leg, err)})
}

// relay copies a leg's body to the client as it arrives, flushing after
// each read, until either side ends.
func relay(w http.ResponseWriter, body io.Reader) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// models answers GET /v1/models with the decode instance's list, which
// names the models both instances serve.
func (rt *router) models(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, rt.decode.base+"/v1/models", nil)
	if err != nil {
		writeError(w, err)
		return
	}
	resp, err := rt.plain.Do(req)
	if err != nil {
		writeLegError(w, r, writeError, "models", err)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, maxLegBytes))
}
