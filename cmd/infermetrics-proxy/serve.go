package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/views"
)

// addrs are the addresses the proxy listens on.
type addrs struct{ proxy, metrics string }

// flushTimeout bounds the metrics flush at shutdown (an unreachable
// collector must not hold the process), and cutWait how long requests cut
// at the drain deadline get to record their end.
const (
	flushTimeout = 10 * time.Second
	cutWait      = 5 * time.Second
)

// serve runs the proxy until ctx is done, then drains and flushes.
func serve(ctx context.Context, c *config, log *slog.Logger, ready chan<- addrs) error {
	onErr := func(err error) { log.Warn("metrics", "error", err) }
	provider, m, err := newRecording(ctx, c, onErr, log)
	if err != nil {
		return err
	}

	var draining atomic.Bool
	var inflight sync.WaitGroup
	// The HTTP families carry no model_name: they go on -default-model's
	// Engine, which they create at start.
	transport := upstreamTransport(c)
	h := newHandler(c, transport, m.engine, m.engine(""), onErr, log)
	proxySrv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: c.readHeaderTimeout,
		IdleTimeout:       c.idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", provider.Handler())
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		if draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	metricsSrv := &http.Server{Handler: mux, ReadHeaderTimeout: c.readHeaderTimeout, IdleTimeout: c.idleTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}

	pl, err := c.listenOn("listen", c.listen)
	if err != nil {
		return errors.Join(err, provider.Shutdown(context.Background()))
	}
	ml, err := c.listenOn("metrics-listen", c.metricsListen)
	if err != nil {
		return errors.Join(err, pl.Close(), provider.Shutdown(context.Background()))
	}
	errc := make(chan error, 2)
	go func() { errc <- proxySrv.Serve(pl) }()
	go func() { errc <- metricsSrv.Serve(ml) }()
	for _, u := range c.upstreams {
		if w := apiPathWarning(u); w != "" {
			log.Warn(w)
		}
	}
	log.Info("infermetrics-proxy serving", "listen", pl.Addr().String(), "metrics", "http://"+ml.Addr().String()+"/metrics",
		"upstreams", c.upstreams.String(), "routes", c.routes.String(), "include_usage", c.includeUsage, "exporters", provider.Exporters(),
		"attributes", c.attributes.String(), "priced_models", c.usage.prices.Len())
	if c.usage.saltGenerated {
		log.Warn("-attribute with apikey but no -attribute-salt: a random salt for this process, so that each API key's " +
			"value changes when the proxy restarts; give -attribute-salt (the same on every proxy) to keep them")
	}
	if ready != nil {
		ready <- addrs{proxy: pl.Addr().String(), metrics: ml.Addr().String()}
	}
	checkCtx, stopCheck := context.WithCancel(ctx)
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		checkUpstreams(checkCtx, c.upstreams, transport.Proxy, log)
	}()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	stopCheck()
	<-checked
	draining.Store(true)
	log.Info("draining", "timeout", c.shutdownTimeout.String())
	dctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	err = proxySrv.Shutdown(dctx)
	cancel()
	if err != nil {
		log.Warn("drain deadline passed: cutting the requests still in flight", "error", err)
		_ = proxySrv.Close()
	}
	if !waitGroup(&inflight, cutWait) {
		log.Warn("requests still running after the cut", "waited", cutWait.String())
	}
	fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if err := provider.Shutdown(fctx); err != nil {
		log.Warn("metrics flush", "error", err)
	}
	_ = metricsSrv.Shutdown(fctx)
	log.Info("stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// listenOn listens on addr, the value of the flag name; its error names
// the flag (or its variable) and the address: "-listen 127.0.0.1:8787:
// bind: address already in use".
func (c *config) listenOn(name, addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err // without "listen tcp ADDR", which the flag's name replaces
		}
		return nil, fmt.Errorf("%s: %w", c.setting(name, addr), err)
	}
	return l, nil
}

// newRecording builds the MeterProvider (exporters.Setup, with the views
// and the cardinality limit the usage families need) and the models'
// Engines on it.
func newRecording(ctx context.Context, c *config, onErr func(error), log *slog.Logger) (*exporters.Provider, *models, error) {
	vv, err := views.VLLM()
	if err != nil {
		return nil, nil, err
	}
	sv, err := views.Semconv()
	if err != nil {
		return nil, nil, err
	}
	setup := []exporters.Option{
		exporters.WithServiceName(c.serviceName),
		exporters.WithViews(append(vv, sv...)...),
		exporters.WithErrorHandler(onErr),
		exporters.WithGoMetrics(), // its /metrics is the proxy's only one
	}
	if c.instanceID != "" {
		setup = append(setup, exporters.WithServiceInstanceID(c.instanceID))
	}
	if n := c.cardinalityLimit(); n > 0 {
		setup = append(setup, exporters.WithCardinalityLimit(n))
	}
	provider, err := exporters.Setup(ctx, setup...)
	if err != nil {
		return nil, nil, err
	}
	m := newModels(c.maxModels, c.defaultModel, func(model string) (*instrument.Engine, error) {
		return c.newEngine(provider, model)
	}, log)
	return provider, m, nil
}

// newEngine is the Engine the proxy records a model's requests on.
func (c *config) newEngine(provider *exporters.Provider, model string) (*instrument.Engine, error) {
	rec, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(provider.MeterProvider()),
		instrument.WithModelName(model), instrument.WithMaxModelLen(c.maxModelLen), instrument.WithGenAISemconv(),
		instrument.WithGenAI(instrument.DefaultGenAIOperation, c.provider)},
		c.usage.recorderOptions()...)...)
	if err != nil {
		return nil, err
	}
	return rec.Engine(0)
}

// waitGroup waits for wg at most d; it reports whether wg is done.
func waitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// newHandler returns the proxy's handler: the include_usage rewrite (with
// -include-usage) around openaihttp's handler (recording each client
// request, and every request in the HTTP families on httpEngine) around the
// reverse proxy, whose transport is openaihttp's over base, recording each
// upstream leg. The reverse proxy passes each leg's body on as it reads it,
// so the handler takes what the transport read instead of reading it
// again: each byte of a response is read once. Its rewrite sends upstream
// the request body the handler read (openaihttp.ForwardBody), which the
// transport then takes as the handler read it.
func newHandler(c *config, base http.RoundTripper, engineFor func(string) *instrument.Engine, httpEngine *instrument.Engine, onErr func(error), log *slog.Logger) http.Handler {
	common := []openaihttp.Option{openaihttp.WithEngineFor(engineFor), openaihttp.WithRoutes(c.routes...),
		openaihttp.WithMaxRequestBody(c.maxRequestBody), openaihttp.WithErrorHandler(onErr)}
	rp := &httputil.ReverseProxy{
		Rewrite:    rewrite,
		Transport:  openaihttp.NewTransport(base, common...),
		BufferPool: newCopyBuffers(),
		ErrorLog:   slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		// A client that left (or was cut at the drain deadline) gets
		// nothing: openaihttp records it as an abort, counted 200 in the
		// HTTP families as vLLM counts a client that disconnected. A
		// client whose upstream failed gets a 502 that says why.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				log.Debug("client went away", "path", r.URL.Path, "error", err)
				return
			}
			u := upstreamFrom(r.Context())
			log.Warn("upstream", "upstream", u.String(), "path", r.URL.Path, "error", err)
			writeUpstreamError(w, u, err)
		},
	}
	// The handler records a ReverseProxy's panic(http.ErrAbortHandler) (its
	// client or upstream went away mid-body) as the response stood, an
	// abort when the client left, and raises it again, so that net/http
	// cuts the client's connection. The handler label of the HTTP families
	// is the pattern of the route a path matches (-route, then openaihttp's
	// own), none for any other: no client's path segment becomes a label.
	var h http.Handler = openaihttp.NewHandler(&picker{ups: c.upstreams, next: rp},
		slices.Concat(common, []openaihttp.Option{openaihttp.WithHTTPMetrics(httpEngine, nil)}, c.usage.handlerOptions())...)
	if c.includeUsage {
		h = &usageHandler{next: h, limit: c.maxRequestBody, routes: c.routes, log: log}
	}
	return h
}

// copyBuffers are the buffers the reverse proxy copies response bodies
// through (httputil.BufferPool), kept for the next request instead of 32
// KiB of garbage each: at most maxIdleCopyBuffers wait between requests.
// A channel, not a sync.Pool: Put would box each slice in an allocation.
type copyBuffers chan []byte

const (
	copyBufferSize     = 32 << 10 // httputil.ReverseProxy's own
	maxIdleCopyBuffers = 64
)

func newCopyBuffers() copyBuffers { return make(copyBuffers, maxIdleCopyBuffers) }

func (c copyBuffers) Get() []byte {
	select {
	case b := <-c:
		return b
	default:
		return make([]byte, copyBufferSize)
	}
}

func (c copyBuffers) Put(b []byte) {
	select {
	case c <- b[:cap(b)]:
	default: // as many idle as kept: this one is garbage
	}
}

// upstreamTransport is the transport to the upstreams, under openaihttp's.
func upstreamTransport(c *config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = c.responseHeaderTimeout
	t.IdleConnTimeout = c.upstreamIdleTimeout
	if c.upstreamRoots != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: c.upstreamRoots}
	}
	t.DisableCompression = true // pass Accept-Encoding and the body as they are
	t.MaxIdleConnsPerHost = 64
	return t
}

// picker sends each request to the next upstream in turn (round robin),
// saying which in the request's context (for rewrite) and to openaihttp's
// transport (the backend and backend.role of its client metrics; a decode
// role makes the cached prompt tokens external_kv_transfer).
type picker struct {
	ups  upstreams
	n    atomic.Uint64
	next http.Handler
}

type upstreamKey struct{}

func (p *picker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u := p.ups[(p.n.Add(1)-1)%uint64(len(p.ups))]
	ctx := context.WithValue(r.Context(), upstreamKey{}, u)
	ctx = openaihttp.ContextWithBackend(ctx, openaihttp.Backend{Name: u.url.Host, Role: u.role})
	p.next.ServeHTTP(w, r.WithContext(ctx))
}

func upstreamFrom(ctx context.Context) upstream {
	u, _ := ctx.Value(upstreamKey{}).(upstream)
	return u
}

// forwarded are the headers ReverseProxy's Rewrite mode removes from the
// outgoing request; the proxy passes the client's on unchanged.
var forwarded = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// rewrite points the request at its upstream and keeps the client's headers
// and query. ReverseProxy removes the query parameters net/url does not
// parse (one with a ';' or a bad escape, a credential with them) before
// Rewrite: the proxy, which reads none, passes the query on as it came.
func rewrite(pr *httputil.ProxyRequest) {
	u := upstreamFrom(pr.In.Context())
	if u.url == nil {
		return // not reached: picker always sets one
	}
	openaihttp.ForwardBody(pr) // the transport takes what the handler read of it
	pr.SetURL(u.url)
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery // an upstream URL has none (parseUpstream)
	for _, k := range forwarded {
		if v, ok := pr.In.Header[k]; ok {
			pr.Out.Header[k] = v
		}
	}
}

// models gives each model name its Engine, for openaihttp.WithEngineFor:
// at most max names get their own, the others share OverflowModel's.
type models struct {
	mu       sync.RWMutex
	byName   map[string]*instrument.Engine
	max      int
	def      string
	build    func(model string) (*instrument.Engine, error)
	overflow *instrument.Engine
	capped   bool // more than max names were asked for (logged)
	log      *slog.Logger
}

func newModels(max int, def string, build func(string) (*instrument.Engine, error), log *slog.Logger) *models {
	return &models{byName: map[string]*instrument.Engine{}, max: max, def: def, build: build, log: log}
}

// engine returns the Engine of a model ("" is -default-model); nil records
// nothing (only when even the overflow Engine cannot be built).
func (m *models) engine(model string) *instrument.Engine {
	if model == "" {
		model = m.def
	}
	m.mu.RLock()
	e, ok := m.byName[model]
	m.mu.RUnlock()
	if ok {
		return e
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byName[model]; ok {
		return e
	}
	switch {
	case len(m.byName) >= m.max:
		if !m.capped {
			m.capped = true
			m.log.Warn("more models than -max-models: the others are recorded as "+OverflowModel, "max_models", m.max)
		}
	case model != OverflowModel:
		e, err := m.build(model)
		if err == nil {
			m.byName[model] = e
			m.log.Info("recording model", "model_name", model, "models", len(m.byName))
			return e
		}
		// Not UTF-8 (or too long): a name no server serves, kept off the
		// series of -default-model, which are the served model's.
		m.log.Debug("model name refused: recorded as "+OverflowModel, "model_name", fmt.Sprintf("%.80q", model), "error", err)
	}
	if m.overflow == nil {
		e, err := m.build(OverflowModel)
		if err != nil {
			m.log.Error("overflow model", "error", err)
			return nil
		}
		m.overflow = e
	}
	return m.overflow
}
