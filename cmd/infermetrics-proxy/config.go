package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// EnvPrefix starts the environment variable of every flag: -metrics-listen
// is INFERMETRICS_PROXY_METRICS_LISTEN. A flag given on the command line wins
// over its variable, which wins over the default.
const EnvPrefix = "INFERMETRICS_PROXY_"

// RoleAggregated is the role of an upstream that does both prefill and
// decode; prefill and decode are instrument.RolePrefill and RoleDecode.
const RoleAggregated = "aggregated"

// OverflowModel is the model_name of the requests for models beyond
// -max-models and of model names the Recorder refuses (not UTF-8): their
// series are merged into this one so that clients cannot grow the series
// without bound.
const OverflowModel = "_overflow"

// DefaultUpstreamIdleTimeout is how long an idle connection to an upstream
// is kept: below the 5 s after which uvicorn (vLLM's and SGLang's server;
// timeout_keep_alive in uvicorn/config.py @ e6c7ce79) closes an idle
// keep-alive connection, so that no POST is sent on one as it closes,
// which the proxy cannot resend and would answer 502.
const DefaultUpstreamIdleTimeout = 4 * time.Second

// upstream is one server the proxy forwards to.
type upstream struct {
	url  *url.URL
	role string // "", RoleAggregated, instrument.RolePrefill or RoleDecode
}

func (u upstream) String() string {
	if u.role == "" {
		return u.url.String()
	}
	return u.role + "=" + u.url.String()
}

// upstreams are the upstreams of -upstream.
type upstreams []upstream

func (us *upstreams) String() string {
	s := make([]string, len(*us))
	for i, u := range *us {
		s[i] = u.String()
	}
	return strings.Join(s, ",")
}

// upstreamValues is the repeatable -upstream flag, parsed by check: its
// Set refuses nothing, as the flag package would echo a value refused, and
// an upstream URL may hold a password.
type upstreamValues []string

func (vs *upstreamValues) String() string { return strings.Join(*vs, ",") }

// Set adds [ROLE=]URL; several comma-separated values are allowed (the
// environment variable's form).
func (vs *upstreamValues) Set(v string) error {
	for _, one := range strings.Split(v, ",") {
		*vs = append(*vs, strings.TrimSpace(one))
	}
	return nil
}

// parseUpstream parses [ROLE=]URL. A URL with user info is refused: the
// proxy sends each client's own credentials, as they came, and no other.
// Its errors show the value redacted.
func parseUpstream(v string) (upstream, error) {
	var up upstream
	shown := redact(v)
	if role, rest, ok := strings.Cut(v, "="); ok && !strings.Contains(role, "/") {
		switch role {
		case instrument.RolePrefill, instrument.RoleDecode, RoleAggregated:
		default:
			return up, fmt.Errorf("upstream %q: role %q is not prefill, decode or aggregated", shown, role)
		}
		up.role, v = role, rest
	}
	u, err := url.Parse(v)
	if err == nil && u.User != nil {
		return up, fmt.Errorf("upstream %q: user info (user:password@) is not supported: the upstream gets each client's own credentials (Authorization, api-key, ...) as they came", shown)
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return up, fmt.Errorf("upstream %q: want [prefill=|decode=|aggregated=]http(s)://host:port[/base-path]", shown)
	}
	up.url = u
	return up, nil
}

// redact returns an -upstream value as an error shows it: its user info,
// query and fragment, which may hold credentials, replaced by xxxxx. It
// reads the text, so that it hides them in a value net/url refuses too.
func redact(v string) string {
	if at := strings.LastIndexByte(v, '@'); at >= 0 {
		from := 0
		if i := strings.Index(v, "//"); i >= 0 && i < at {
			from = i + 2
		}
		v = v[:from] + "xxxxx" + v[at:]
	}
	if i := strings.IndexAny(v, "?#"); i >= 0 {
		v = v[:i+1] + "xxxxx"
	}
	return v
}

// routes is the repeatable -route flag: PATTERN=API, openaihttp's routes.
type routes []openaihttp.Route

// String writes the routes in the environment variable's form (setList):
// comma-separated, a comma within a pattern as \,.
func (rs *routes) String() string {
	s := make([]string, len(*rs))
	for i, r := range *rs {
		s[i] = strings.ReplaceAll(r.Pattern(), ",", `\,`) + "=" + r.API()
	}
	return strings.Join(s, ",")
}

// Set parses one PATTERN=API: a -route flag is one route, commas included
// (a path may hold them).
func (rs *routes) Set(v string) error {
	v = strings.TrimSpace(v)
	i := strings.LastIndexByte(v, '=')
	if i < 0 {
		return fmt.Errorf("route %q: want PATTERN=API", v)
	}
	r, err := openaihttp.NewRoute(v[:i], v[i+1:])
	if err != nil {
		return err
	}
	*rs = append(*rs, r)
	return nil
}

// setList parses INFERMETRICS_PROXY_ROUTE: routes separated by commas, \,
// standing for a comma within a pattern. A route ends in its API's name,
// never in a backslash, so \, is never a backslash ending a route.
func (rs *routes) setList(v string) error {
	var one strings.Builder
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] == '\\' && i+1 < len(v) && v[i+1] == ',':
			one.WriteByte(',')
			i++
		case v[i] == ',':
			if err := rs.Set(one.String()); err != nil {
				return err
			}
			one.Reset()
		default:
			one.WriteByte(v[i])
		}
	}
	return rs.Set(one.String())
}

// listValue is a flag whose environment variable is a list (setList),
// where the flag itself takes one value.
type listValue interface{ setList(string) error }

// config is everything the flags and their variables set.
type config struct {
	listen                string
	metricsListen         string
	upstreamValues        upstreamValues
	upstreams             upstreams // parsed from upstreamValues by check
	routes                routes
	includeUsage          bool
	maxModels             int
	defaultModel          string
	maxRequestBody        int
	maxModelLen           int
	responseHeaderTimeout time.Duration
	upstreamIdleTimeout   time.Duration
	upstreamCAFile        string
	upstreamRoots         *x509.CertPool // the system roots and -upstream-ca-file's; nil without the flag
	readHeaderTimeout     time.Duration
	idleTimeout           time.Duration
	shutdownTimeout       time.Duration
	serviceName           string
	instanceID            string
	provider              string // gen_ai.provider.name; from the first upstream's host by check when not given
	logFormat             string
	logLevel              string
	fromEnv               map[string]string // flag name -> the variable that set it

	// The usage families (attribution.go).
	attributes         attributes
	attributeMaxValues int
	attributeSalt      string
	priceFiles         priceFiles
	usage              usage // built from them by check
}

// usageText is what -h prints before the flags.
var usageText = `infermetrics-proxy: a reverse proxy that gives any OpenAI-compatible inference
server (Ollama, llama.cpp's server, vLLM, SGLang, ...) vLLM's metrics.

` + wrap("Every request and response passes through unchanged (but for -include-usage), on every path. "+
	"POSTs to paths ending in "+list(openaihttp.RecordedPaths())+", under any base path, and to the -route patterns "+
	"are recorded with vLLM's families, per model named in the request, and every request, on every path, "+
	"in vLLM's HTTP families (http_requests_total, ...), by route pattern. "+
	"They are served on -metrics-listen at /metrics, beside /health, "+
	"and pushed over OTLP when the standard OTEL_EXPORTER_OTLP_* variables are set.", 80) + `

Usage:
  infermetrics-proxy -upstream http://127.0.0.1:11434 [flags]

Every flag can also be set by the environment variable INFERMETRICS_PROXY_<NAME>
(upper case, '-' as '_': -metrics-listen is INFERMETRICS_PROXY_METRICS_LISTEN).
INFERMETRICS_PROXY_UPSTREAM, INFERMETRICS_PROXY_ROUTE,
INFERMETRICS_PROXY_ATTRIBUTE and INFERMETRICS_PROXY_PRICES take comma-separated
lists; a comma within a route's pattern is written \, there (a -route flag is
one route, commas included). A flag on the command line wins over its
variable, which wins over the default.

Flags:
`

// list writes items as a list in English: "a, b and c".
func list(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// wrap breaks text into lines of at most width bytes, between words.
func wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for _, w := range strings.Fields(text) {
		switch {
		case line == 0:
		case line+1+len(w) > width:
			b.WriteByte('\n')
			line = 0
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(w)
		line += len(w)
	}
	return b.String()
}

// parseConfig reads the flags of args and, for flags not given, the
// environment (getenv); usage and errors go to out.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (*config, error) {
	c := &config{fromEnv: map[string]string{}}
	fs := flag.NewFlagSet("infermetrics-proxy", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usageText)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8787", "address the proxy serves clients on, loopback only by default; :8787 serves every\ninterface (a container, clients on other hosts)")
	fs.StringVar(&c.metricsListen, "metrics-listen", "127.0.0.1:9464", "address of /metrics (Prometheus) and /health (200 while serving, 503 while draining),\nloopback only by default; :9464 serves every interface (a container, a Prometheus\nelsewhere)")
	fs.Var(&c.upstreamValues, "upstream", "upstream server as [ROLE=]URL, ROLE one of prefill, decode, aggregated (optional), URL\nwithout user info (the clients' credentials pass on); repeat for several: requests go\nto them in turn (round robin). Required")
	fs.Var(&c.routes, "route", wrap("`PATTERN=API`: record the POSTs to the paths that match PATTERN as API, one of "+
		strings.Join(openaihttp.APIs(), ", ")+" (not recorded); tried before the built-in paths; repeatable, one route per flag. "+
		"A segment {name} matches one segment, {name...} any number; {model} or {deployment} is the model "+
		"when the body names none. PATTERN is the handler label of the HTTP families. "+
		"Example: -route '/serving/{model}/generate=chat'", 88))
	fs.BoolVar(&c.includeUsage, "include-usage", false, "add stream_options.include_usage to streamed requests that lack it, so that token\ncounts are known, and remove the usage chunk the client did not ask for from its stream\n(those streams are asked for unencoded; gzip and deflate ones are decoded for the client)")
	fs.IntVar(&c.maxModels, "max-models", 32, "most model names recorded apart, -default-model (always recorded: the HTTP families go on it)\nincluded; requests for further models, or for names that are not UTF-8, are recorded as\nmodel_name=\""+OverflowModel+"\"")
	fs.StringVar(&c.defaultModel, "default-model", "default", "model_name of requests whose body names no model")
	fs.IntVar(&c.maxRequestBody, "max-request-body", openaihttp.DefaultMaxRequestBody, "bytes of a request body read to learn its model, stream and max_tokens (the body\nis always passed on whole); -include-usage rewrites only bodies within this size")
	fs.IntVar(&c.maxModelLen, "max-model-len", instrument.DefaultMaxModelLen, "the model's context length, from which the token histograms get vLLM's 1-2-5 buckets")
	fs.DurationVar(&c.responseHeaderTimeout, "response-header-timeout", 0, "longest wait for an upstream's response headers (0: no limit); a non-streamed\nresponse's headers come only when its generation is done, so keep it above the longest generation")
	fs.DurationVar(&c.upstreamIdleTimeout, "upstream-idle-timeout", DefaultUpstreamIdleTimeout, "how long an idle connection to an upstream is kept for the next request (0: no limit);\n"+
		"keep it below the upstream's keep-alive timeout (uvicorn's, vLLM's and SGLang's: 5 s; gunicorn's: 2 s)")
	fs.StringVar(&c.upstreamCAFile, "upstream-ca-file", "", "PEM file of CA certificates trusted for https upstreams besides the system roots\n(a private CA; the upstream's host name is the server name checked and sent as SNI)")
	fs.DurationVar(&c.readHeaderTimeout, "read-header-timeout", 10*time.Second, "longest time a client may take to send its request headers")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 2*time.Minute, "how long an idle keep-alive client connection stays open")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGINT or SIGTERM, how long requests in flight (streams included) may take to\nfinish before they are cut; metrics are flushed after")
	fs.Var(&c.attributes, "attribute", wrap("`NAME=SOURCE`: record the usage families (infermetrics_usage_*: tokens by kind, "+
		"requests by finish reason and error type, cost, duration, TTFT) by a dimension NAME, each request's value "+
		"taken from SOURCE: header:HEADER (a request header; not a credential header), user (the body's user, "+
		"Anthropic's metadata.user_id) or apikey (the API key as the first 12 hex digits of HMAC-SHA256(salt, key), "+
		"never the key); repeatable, at most "+strconv.Itoa(instrument.MaxDimensions)+" dimensions. "+
		"Example: -attribute tenant=header:X-Tenant -attribute key=apikey", 88))
	fs.IntVar(&c.attributeMaxValues, "attribute-max-values", instrument.DefaultMaxValues, wrap("distinct values each -attribute "+
		"dimension records, 1 to "+strconv.Itoa(instrument.MaxMaxValues)+", over all models; new ones past it are recorded as "+
		instrument.AttributionOverflow+", and so are the combinations of values past twice it "+
		"(infermetrics_attribution_overflow_total counts them)", 88))
	fs.StringVar(&c.attributeSalt, "attribute-salt", "", wrap("the salt of the apikey dimensions: keep it secret, and the same on "+
		"every proxy of a deployment and across restarts; without it a random one per process, so that a key's "+
		"value changes when the proxy restarts (a warning at start says so)", 88))
	fs.Var(&c.priceFiles, "prices", wrap("`FILE`: a price table in the format of LiteLLM's "+
		"model_prices_and_context_window.json: record each request's cost, cache-aware "+
		"(infermetrics_usage_cost_total, infermetrics_usage_cost_uncached_total) and count the requests whose model "+
		"has no price (infermetrics_usage_unpriced_requests_total); repeatable: a model in a later file replaces "+
		"its entry in the earlier ones. The entries under -provider's prefix in LiteLLM's list (mistral/..., "+
		"azure/..., groq/...) come first: docs/pricing.md", 88))
	fs.StringVar(&c.provider, "provider", "", "gen_ai.provider.name of the GenAI metrics (openai, anthropic, azure.ai.openai, ...,\nself_hosted); default: the first -upstream's, by its host (api.openai.com is openai,\n...: openaihttp.ProviderName), self_hosted for any other host")
	fs.StringVar(&c.serviceName, "service-name", "infermetrics-proxy", "service.name resource attribute (OTLP)")
	fs.StringVar(&c.instanceID, "instance-id", "", "service.instance.id resource attribute (OTLP); default a random UUID.\nGive the proxies of one deployment distinct ids")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json (log/slog)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			var err error
			if l, ok := f.Value.(listValue); ok {
				err = l.setList(v)
			} else {
				err = fs.Set(f.Name, v)
			}
			if err != nil {
				errs = append(errs, envError(name, f, v, err))
			}
			c.fromEnv[f.Name] = name
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, c.check()
}

// envName is a flag's environment variable: -metrics-listen is
// INFERMETRICS_PROXY_METRICS_LISTEN.
func envName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// envError is the error of the variable name, whose value v flag f refused
// with err: it names the variable, the value (shownValue) and, for the
// flag package's kinds, whose own error is "parse error", the form wanted.
func envError(name string, f *flag.Flag, v string, err error) error {
	shown := fmt.Sprintf("%s=%q", name, shownValue(f.Name, v))
	want := wantForm(f.Value)
	switch {
	case want == "":
		return fmt.Errorf("%s: %w", shown, err)
	case err.Error() == "value out of range": // the flag package's error for a number too large
		return fmt.Errorf("%s: value out of range", shown)
	}
	return fmt.Errorf("%s: %s", shown, want)
}

// wantForm says what a value of the flag package's kind of v looks like
// (the forms its Set accepts: strconv's and time.ParseDuration's), "" for
// the kinds of this package, whose errors say it.
func wantForm(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case bool:
		return "want true or false (or 1, 0, t, f, T, F, TRUE, FALSE, True, False)"
	case time.Duration:
		return "want a Go duration like 30s, 1m30s or 500ms (a unit after each number but 0)"
	case int, int64:
		return "want a whole number"
	case uint, uint64:
		return "want a whole number, 0 or more"
	case float64:
		return "want a number"
	}
	return ""
}

// shownValue is v, the value of the flag name, as an error shows it: an
// -upstream redacted (redact), the value of a flag named for a secret (a
// salt, a key, a token, a password) as xxxxx.
func shownValue(name, v string) string {
	if name == "upstream" {
		return redact(v)
	}
	for _, w := range strings.Split(name, "-") {
		switch w {
		case "salt", "secret", "key", "token", "password":
			return "xxxxx"
		}
	}
	return v
}

func (c *config) check() error {
	var errs []error
	if len(c.upstreamValues) == 0 {
		errs = append(errs, errors.New("no upstream: give -upstream URL (or INFERMETRICS_PROXY_UPSTREAM)"))
	}
	for _, v := range c.upstreamValues {
		u, err := parseUpstream(v)
		if err != nil {
			if name, ok := c.fromEnv["upstream"]; ok {
				err = fmt.Errorf("%s: %w", name, err)
			}
			errs = append(errs, err)
			continue
		}
		c.upstreams = append(c.upstreams, u)
	}
	if c.provider == "" && len(c.upstreams) > 0 {
		c.provider = openaihttp.ProviderName(c.upstreams[0].url.Host)
	}
	if !utf8.ValidString(c.provider) || len(c.provider) > instrument.MaxModelNameLen {
		errs = append(errs, fmt.Errorf("%s: want UTF-8 of at most %d bytes", c.setting("provider", strconv.Quote(c.provider)), instrument.MaxModelNameLen))
	}
	if c.maxModels < 1 {
		errs = append(errs, fmt.Errorf("%s: want at least 1", c.setting("max-models", strconv.Itoa(c.maxModels))))
	}
	if c.maxRequestBody < 0 {
		errs = append(errs, fmt.Errorf("%s: want 0 or more", c.setting("max-request-body", strconv.Itoa(c.maxRequestBody))))
	}
	if c.defaultModel == "" || c.defaultModel == OverflowModel {
		errs = append(errs, fmt.Errorf("%s: want a model name other than %q", c.setting("default-model", strconv.Quote(c.defaultModel)), OverflowModel))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"response-header-timeout", c.responseHeaderTimeout}, {"upstream-idle-timeout", c.upstreamIdleTimeout}, {"read-header-timeout", c.readHeaderTimeout}, {"idle-timeout", c.idleTimeout}, {"shutdown-timeout", c.shutdownTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: want 0 or more", c.setting(d.name, d.v.String())))
		}
	}
	if err := c.loadRoots(); err != nil {
		errs = append(errs, err)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		errs = append(errs, fmt.Errorf("%s: want text or json", c.setting("log-format", strconv.Quote(c.logFormat))))
	}
	if _, err := c.level(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.checkUsage()...)
	return errors.Join(errs...)
}

// setting is a flag's value as an error shows it (shownValue): "-name
// VALUE", or "VARIABLE=VALUE" when its environment variable set it, so
// that the error points where the value was given.
func (c *config) setting(name, value string) string {
	value = shownValue(name, value)
	if v, ok := c.fromEnv[name]; ok {
		return v + "=" + value
	}
	return "-" + name + " " + value
}

// loadRoots reads -upstream-ca-file into the roots https upstreams are
// checked against, beside the system's.
func (c *config) loadRoots() error {
	if c.upstreamCAFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.upstreamCAFile)
	if err != nil {
		return fmt.Errorf("%s: %w", c.setting("upstream-ca-file", strconv.Quote(c.upstreamCAFile)), err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(b) {
		return fmt.Errorf("%s: no PEM certificate in it", c.setting("upstream-ca-file", strconv.Quote(c.upstreamCAFile)))
	}
	c.upstreamRoots = roots
	return nil
}

// envLookup is os.Getenv, for parseConfig.
var envLookup = os.Getenv
