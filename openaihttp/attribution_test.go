package openaihttp_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
	"github.com/infermetrics/infermetrics/views"
)

// prices is a Pricer of one model, a price per token of each kind, the
// reasoning tokens within the output.
type prices struct {
	model   string
	perKind map[stats.TokenKind]float64
	cost    *stats.Cost // returned as it is, when set
}

func (p prices) Cost(model, _ string, u stats.TokenUsage) (stats.Cost, bool) {
	if model != p.model {
		return stats.Cost{}, false
	}
	if p.cost != nil {
		return *p.cost, true
	}
	c := stats.Cost{Known: true}
	for _, k := range []stats.TokenKind{stats.TokenInput, stats.TokenCacheRead, stats.TokenCacheWrite, stats.TokenOutput} {
		n, _ := u.Get(k)
		c.Charged += float64(n) * p.perKind[k]
		if k == stats.TokenCacheRead || k == stats.TokenCacheWrite {
			c.Uncached += float64(n) * p.perKind[stats.TokenInput]
		} else {
			c.Uncached += float64(n) * p.perKind[k]
		}
	}
	return c, true
}

var testPrices = prices{model: model, perKind: map[stats.TokenKind]float64{
	stats.TokenInput: 1e-6, stats.TokenCacheRead: 0.5e-6, stats.TokenOutput: 2e-6}}

// keyHash is an API key's attribution value, HMAC-SHA256(salt, key)'s
// first 12 hex digits.
func keyHash(salt, key string) string {
	m := hmac.New(sha256.New, []byte(salt))
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil))[:12]
}

const salt = "test-salt"

// attributed is a Recorder with three dimensions and a price table, and a
// handler taking them from X-Tenant, the body's user and the API key.
type attributed struct {
	*rec
	errs *testutil.Errors
	h    http.Handler
}

func newAttributed(t *testing.T, next http.Handler, p openaihttp.Pricer, sources ...openaihttp.AttributionSource) *attributed {
	t.Helper()
	a, err := instrument.NewAttribution(instrument.Dimension{Name: "tenant"}, instrument.Dimension{Name: "user"},
		instrument.Dimension{Name: "key"})
	if err != nil {
		t.Fatal(err)
	}
	if sources == nil {
		sources = []openaihttp.AttributionSource{openaihttp.FromHeader("x-tenant"), openaihttp.FromUser(),
			openaihttp.FromAPIKey([]byte(salt))}
	}
	c := newRec(t, instrument.WithAttribution(a), instrument.WithPriceTable())
	errs := &testutil.Errors{}
	h := openaihttp.NewHandler(next, openaihttp.WithEngine(c.e), openaihttp.WithAttribution(a, sources...),
		openaihttp.WithPrices(p), openaihttp.WithErrorHandler(errs.Add))
	return &attributed{rec: c, errs: errs, h: h}
}

func (a *attributed) send(path, body string, header ...string) {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	a.h.ServeHTTP(httptest.NewRecorder(), req)
}

// usage returns a usage family's value for the three dimensions' values.
func (a *attributed) usage(family, tenant, user, key string, extra ...string) float64 {
	a.t.Helper()
	return a.value(family, append([]string{"tenant", tenant, "user", user, "key", key}, extra...)...)
}

const (
	chatUsage = `{"object":"chat.completion","model":"qwen-7b-0601","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":100,"completion_tokens":10,"total_tokens":110}}`
	messagesUsage = `{"type":"message","role":"assistant","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn",` +
		`"usage":{"input_tokens":5,"output_tokens":3}}`
)

// Each dimension takes its value from its source: a header, the body's
// user (OpenAI's "user", Anthropic's "metadata.user_id") and the API key
// as HMAC-SHA256(salt, key)'s first 12 hex digits, from Authorization's
// Bearer token, x-api-key or api-key; each request with usage is priced by
// the Pricer, or counted as unpriced.
func TestAttributionSources(t *testing.T) {
	a := newAttributed(t, jsonHandler(200, chatUsage), testPrices)
	a.send("/v1/chat/completions", `{"model":"qwen-7b","user":"alice","messages":[]}`,
		"X-Tenant", "acme", "Authorization", "Bearer sk-one")
	a.send("/v1/chat/completions", `{"model":"qwen-7b","user":"alice","messages":[]}`,
		"X-Tenant", "acme", "Api-Key", "az-two")
	a.send("/v1/chat/completions", `{"model":"unpriced","messages":[]}`)
	m := newAttributed(t, jsonHandler(200, messagesUsage), testPrices)
	m.send("/v1/messages", `{"model":"qwen-7b","user":"not-anthropic","metadata":{"user_id":"bob"},"messages":[]}`,
		"x-api-key", "ak-three", "Authorization", "Basic not-a-bearer")
	for _, e := range append(a.errs.Take(), m.errs.Take()...) {
		t.Error(e)
	}

	s := a.snapshot()
	a.rec = s
	one, two := keyHash(salt, "sk-one"), keyHash(salt, "az-two")
	for kind, want := range map[string]float64{"input": 100, "output": 10} {
		for _, key := range []string{one, two} {
			if got := a.usage("infermetrics.usage.tokens_total", "acme", "alice", key, "kind", kind); got != want {
				t.Errorf("tokens %s key %s = %v, want %v", kind, key, got, want)
			}
		}
	}
	// 100 input at 1e-6, 10 output at 2e-6.
	if got := a.usage("infermetrics.usage.cost_total", "acme", "alice", one); math.Abs(got-1.2e-4) > 1e-12 {
		t.Errorf("cost = %v, want 1.2e-4", got)
	}
	if got := a.usage("infermetrics.usage.cost.uncached_total", "acme", "alice", one); math.Abs(got-1.2e-4) > 1e-12 {
		t.Errorf("uncached cost = %v, want 1.2e-4", got)
	}
	if got := a.usage("infermetrics.usage.unpriced_requests_total", "_none", "_none", "_none"); got != 1 {
		t.Errorf("unpriced = %v, want 1", got)
	}
	if got := a.usage("infermetrics.usage.requests_total", "_none", "_none", "_none", "finished_reason", "stop"); got != 1 {
		t.Errorf("requests without values = %v, want 1", got)
	}
	m.rec = m.snapshot()
	if got := m.usage("infermetrics.usage.tokens_total", "_none", "bob", keyHash(salt, "ak-three"), "kind", "input"); got != 5 {
		t.Errorf("Anthropic's input tokens = %v, want 5", got)
	}
}

// Sources that cannot give a value are reported when the handler is built
// and their dimensions recorded as _none; so are all of them when their
// count does not match the dimensions.
func TestAttributionSourcesRefused(t *testing.T) {
	key := keyHash(salt, "sk-one")
	for _, c := range []struct {
		name               string
		sources            []openaihttp.AttributionSource
		tenant, user, hash string // the values recorded
	}{
		{"credential header", []openaihttp.AttributionSource{openaihttp.FromHeader("authorization"), openaihttp.FromUser(),
			openaihttp.FromAPIKey([]byte(salt))}, "_none", "alice", key},
		{"cookie header", []openaihttp.AttributionSource{openaihttp.FromHeader("Cookie"), openaihttp.FromUser(),
			openaihttp.FromAPIKey([]byte(salt))}, "_none", "alice", key},
		{"bad header name", []openaihttp.AttributionSource{openaihttp.FromHeader("x tenant"), openaihttp.FromUser(),
			openaihttp.FromAPIKey([]byte(salt))}, "_none", "alice", key},
		{"no salt", []openaihttp.AttributionSource{openaihttp.FromHeader("X-Tenant"), openaihttp.FromUser(),
			openaihttp.FromAPIKey(nil)}, "acme", "alice", "_none"},
		{"too few sources", []openaihttp.AttributionSource{openaihttp.FromHeader("X-Tenant"), openaihttp.FromUser()},
			"_none", "_none", "_none"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAttributed(t, jsonHandler(200, chatUsage), testPrices, c.sources...)
			if errs := a.errs.Take(); len(errs) != 1 || !errors.Is(errs[0], openaihttp.ErrAttribution) {
				t.Fatalf("reported %v, want one ErrAttribution", errs)
			}
			a.send("/v1/chat/completions", `{"model":"qwen-7b","user":"alice","messages":[]}`,
				"X-Tenant", "acme", "Authorization", "Bearer sk-one", "Cookie", "c")
			for _, e := range a.errs.Take() {
				t.Error(e)
			}
			if got := a.usage("infermetrics.usage.requests_total", c.tenant, c.user, c.hash, "finished_reason", "stop"); got != 1 {
				t.Errorf("requests{%s, %s, %s} = %v, want 1", c.tenant, c.user, c.hash, got)
			}
		})
	}
}

// A Pricer's cost that is not valid is reported, and the request counted
// as unpriced; one within bounds is recorded.
func TestPricesBounded(t *testing.T) {
	bad := stats.Cost{Known: true, Charged: math.NaN()}
	a := newAttributed(t, jsonHandler(200, chatUsage), prices{model: model, cost: &bad})
	a.send("/v1/chat/completions", `{"model":"qwen-7b","messages":[]}`)
	if errs := a.errs.Take(); len(errs) != 1 || !errors.Is(errs[0], stats.ErrNotFinite) {
		t.Errorf("reported %v, want one ErrNotFinite", errs)
	}
	if got := a.usage("infermetrics.usage.unpriced_requests_total", "_none", "_none", "_none"); got != 1 {
		t.Errorf("unpriced = %v, want 1", got)
	}
}

// The API key, or any 8 characters it starts with, never reaches a series
// (labels, values, exemplars) or an error; the salt neither.
func TestAPIKeyNeverRecorded(t *testing.T) {
	const bearer, anthropic, azure = "sk-proj-4Fq9ZtLm2Xw", "sk-ant-api03-Rv7Kp", "az-8c1d5e9f0a2b"
	reader := sdkmetric.NewManualReader()
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vs...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	a, err := instrument.NewAttribution(instrument.Dimension{Name: "key"})
	if err != nil {
		t.Fatal(err)
	}
	errs := &testutil.Errors{}
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName(model),
		instrument.WithAttribution(a), instrument.WithPriceTable(), instrument.WithErrorHandler(errs.Add))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := rec.Engine(0)
	// A NaN price makes the handler report; a max_tokens beyond any bound
	// makes it report the drop: the errors it writes are checked too.
	bad := stats.Cost{Known: true, Charged: math.NaN()}
	h := openaihttp.NewHandler(jsonHandler(200, chatUsage), openaihttp.WithEngine(e),
		openaihttp.WithAttribution(a, openaihttp.FromAPIKey([]byte(salt))), openaihttp.WithPrices(prices{model: model, cost: &bad}),
		openaihttp.WithErrorHandler(errs.Add))
	for _, hdr := range [][2]string{{"Authorization", "Bearer " + bearer}, {"X-Api-Key", anthropic}, {"Api-Key", azure}} {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"qwen-7b","max_tokens":999999999999}`))
		req.Header.Set(hdr[0], hdr[1])
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{"the metrics": fmt.Sprintf("%+v", rm)}
	var reported []string
	for _, err := range errs.Take() {
		reported = append(reported, err.Error())
	}
	if len(reported) < 2 {
		t.Fatalf("reported %q, want the price and the drop reported", reported)
	}
	texts["the errors"] = strings.Join(reported, "\n")
	for where, text := range texts {
		for _, s := range []string{bearer, anthropic, azure, salt} {
			if strings.Contains(text, s[:8]) {
				t.Errorf("%s carry %q", where, s[:8])
			}
		}
	}
	for _, key := range []string{bearer, anthropic, azure} {
		if !strings.Contains(texts["the metrics"], keyHash(salt, key)) {
			t.Errorf("the metrics lack the hash of %s", key[:3])
		}
	}
}

// Every header that carries a credential, by a word of its name, is
// refused as a dimension's source; the headers dimensions are taken from
// are not.
func TestFromHeaderCredentials(t *testing.T) {
	for _, h := range []string{"Authorization", "proxy-authorization", "X-Api-Key", "api-key", "Cookie",
		"x-goog-api-key", "Ocp-Apim-Subscription-Key", "X-Amz-Security-Token", "X-Auth-Token", "X-Client-Secret",
		"X-Apikey", "X-Amz-Credential", "X-Hub-Signature"} {
		if err := openaihttp.FromHeader(h).Err(); !errors.Is(err, openaihttp.ErrAttribution) || !strings.Contains(err.Error(), "credentials") {
			t.Errorf("FromHeader(%q): %v, want a refusal of a credential header", h, err)
		}
	}
	for _, h := range []string{"X-Tenant", "OpenAI-Project", "OpenAI-Organization", "X-Team", "X-Portkey-Trace-Id", "X-Keyword"} {
		if err := openaihttp.FromHeader(h).Err(); err != nil {
			t.Errorf("FromHeader(%q): %v", h, err)
		}
	}
}
