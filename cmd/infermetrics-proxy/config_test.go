package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

// Flags win over INFERMETRICS_PROXY_* variables, which win over defaults.
func TestConfigPrecedence(t *testing.T) {
	env := map[string]string{
		"INFERMETRICS_PROXY_UPSTREAM":         "http://a:1, decode=http://b:2/base",
		"INFERMETRICS_PROXY_LISTEN":           ":1111",
		"INFERMETRICS_PROXY_MAX_MODELS":       "7",
		"INFERMETRICS_PROXY_INCLUDE_USAGE":    "true",
		"INFERMETRICS_PROXY_SHUTDOWN_TIMEOUT": "3s",
		"INFERMETRICS_PROXY_ROUTE":            "/a/{model}=chat, /b=none",
	}
	var out bytes.Buffer
	c, err := parseConfig([]string{"-listen", ":2222"}, func(k string) string { return env[k] }, &out)
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != ":2222" || c.maxModels != 7 || !c.includeUsage || c.shutdownTimeout != 3*time.Second || c.metricsListen != "127.0.0.1:9464" {
		t.Errorf("config %+v", c)
	}
	if got := c.upstreams.String(); got != "http://a:1,decode=http://b:2/base" {
		t.Errorf("upstreams %s", got)
	}
	if got := c.routes.String(); got != "/a/{model}=chat,/b=none" {
		t.Errorf("routes %s", got)
	}
	// A flag replaces the variable's list rather than adding to it.
	c, err = parseConfig([]string{"-upstream", "prefill=http://c:3", "-route", "/x=a=b=embeddings", "-route", "/y=pooling"},
		func(k string) string { return env[k] }, &out)
	if err != nil || c.upstreams.String() != "prefill=http://c:3" || c.routes.String() != "/x=a=b=embeddings,/y=pooling" {
		t.Errorf("upstreams and routes %v %v", c, err)
	}
}

// -provider (INFERMETRICS_PROXY_PROVIDER) sets gen_ai.provider.name;
// without it, the first upstream's host gives it (openaihttp.ProviderName),
// self_hosted for a server of one's own.
func TestConfigProvider(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-upstream", "https://api.openai.com/v1"}, nil, "openai"},
		{[]string{"-upstream", "https://api.anthropic.com", "-upstream", "https://api.openai.com"}, nil, "anthropic"},
		{[]string{"-upstream", "https://my-res.openai.azure.com"}, nil, "azure.ai.openai"},
		{[]string{"-upstream", "http://127.0.0.1:8000"}, nil, "self_hosted"},
		{[]string{"-upstream", "http://127.0.0.1:8000", "-provider", "openai"}, nil, "openai"},
		{[]string{"-upstream", "https://api.openai.com"}, map[string]string{"INFERMETRICS_PROXY_PROVIDER": "azure.ai.openai"}, "azure.ai.openai"},
	} {
		cfg, err := parseConfig(c.args, func(k string) string { return c.env[k] }, &bytes.Buffer{})
		if err != nil {
			t.Errorf("%v %v: %v", c.args, c.env, err)
		} else if cfg.provider != c.want {
			t.Errorf("%v %v: provider %q, want %q", c.args, c.env, cfg.provider, c.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	none := func(string) string { return "" }
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "no upstream"},
		{[]string{"-upstream", "127.0.0.1:8000"}, nil, "want [prefill="},
		{[]string{"-upstream", "ftp://x"}, nil, "want [prefill="},
		{[]string{"-upstream", "boss=http://x"}, nil, `role "boss"`},
		{[]string{"-upstream", "http://x", "-max-models", "0"}, nil, "-max-models 0"},
		{[]string{"-upstream", "http://x", "-log-format", "xml"}, nil, "-log-format"},
		{[]string{"-upstream", "http://x", "-log-level", "loud"}, nil, "-log-level"},
		{[]string{"-upstream", "http://x", "-default-model", OverflowModel}, nil, "-default-model"},
		{[]string{"-upstream", "http://x", "-idle-timeout", "-1s"}, nil, "-idle-timeout"},
		{[]string{"-upstream", "http://x", "-upstream-idle-timeout", "-1s"}, nil, "-upstream-idle-timeout"},
		{[]string{"-upstream", "http://x", "extra"}, nil, "unexpected arguments"},
		{[]string{"-upstream", "http://x", "-route", "/v1/chat"}, nil, "want PATTERN=API"},
		{[]string{"-upstream", "http://x", "-route", "/v1/chat=chatx"}, nil, `API "chatx"`},
		{[]string{"-upstream", "http://x", "-route", "v1/chat=chat"}, nil, "starting with /"},
		{[]string{"-upstream", "http://x"}, map[string]string{"INFERMETRICS_PROXY_ROUTE": "/a={b}"}, "INFERMETRICS_PROXY_ROUTE"},
		{[]string{"-upstream", "http://x"}, map[string]string{"INFERMETRICS_PROXY_MAX_MODELS": "many"}, "INFERMETRICS_PROXY_MAX_MODELS"},
		{[]string{"-upstream", "http://x", "-provider", "\xff"}, nil, "-provider"},
		{[]string{"-upstream", "http://x", "-provider", strings.Repeat("p", 257)}, nil, "-provider"},
	} {
		getenv := none
		if c.env != nil {
			getenv = func(k string) string { return c.env[k] }
		}
		var out bytes.Buffer
		_, err := parseConfig(c.args, getenv, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: error %v, want %q", c.args, c.env, err, c.want)
		}
	}
}

// -h explains every flag and the environment variables, and exits 0; a bad
// configuration exits 2 without serving.
func TestHelpAndExitCodes(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &out, &out, nil); code != 0 {
		t.Errorf("-h exit %d", code)
	}
	for _, want := range []string{"INFERMETRICS_PROXY_METRICS_LISTEN", "-upstream", "-include-usage", "-max-models", "-shutdown-timeout",
		"-response-header-timeout", "-read-header-timeout", "-idle-timeout", "-log-format", "-metrics-listen", "wins over",
		"-route", "ollama_generate", "-upstream-idle-timeout", "-upstream-ca-file"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h lacks %q", want)
		}
	}
	out.Reset()
	if code := run(context.Background(), nil, func(string) string { return "" }, &out, &out, nil); code != 2 || !strings.Contains(out.String(), "no upstream") {
		t.Errorf("no upstream: exit %d, %q", code, out.String())
	}
}

// -log-format json writes one JSON object per line.
func TestJSONLogs(t *testing.T) {
	p := startProxy(t, nil, "-upstream", "http://127.0.0.1:1", "-log-format", "json")
	p.stop(t)
	lines := strings.Split(strings.TrimSpace(p.logs.String()), "\n")
	if len(lines) < 2 {
		t.Fatalf("logs %q", p.logs)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, `{"time":`) || !strings.HasSuffix(l, "}") {
			t.Errorf("not a JSON line: %s", l)
		}
	}
}

// A -route flag is one route, a comma in its pattern included (a path may
// hold one); INFERMETRICS_PROXY_ROUTE is a comma-separated list, where \,
// is a comma within a pattern; the routes are logged in the variable's form.
func TestRouteCommas(t *testing.T) {
	none := func(string) string { return "" }
	var out bytes.Buffer
	c, err := parseConfig([]string{"-upstream", "http://x", "-route", "/tenants/a,b/{model}/generate=chat", "-route", "/c=none"}, none, &out)
	if err != nil {
		t.Fatalf("-route with a comma: %v", err)
	}
	if len(c.routes) != 2 || c.routes[0].Pattern() != "/tenants/a,b/{model}/generate" || c.routes[0].API() != "chat" {
		t.Fatalf("routes %q", c.routes.String())
	}
	logged := c.routes.String()
	if want := `/tenants/a\,b/{model}/generate=chat,/c=none`; logged != want {
		t.Errorf("routes logged as %s, want %s", logged, want)
	}
	env := map[string]string{"INFERMETRICS_PROXY_ROUTE": logged}
	c, err = parseConfig([]string{"-upstream", "http://x"}, func(k string) string { return env[k] }, &out)
	if err != nil || c.routes.String() != logged || c.routes[0].Pattern() != "/tenants/a,b/{model}/generate" {
		t.Errorf("INFERMETRICS_PROXY_ROUTE %s: routes %v, %v", logged, c, err)
	}
}

// An environment variable's error names the variable, its value and the
// form wanted, for every kind of flag: the flag package's (bool, int,
// duration: their own error is "parse error"), and the values this
// package checks (strings, lists, files), which name the variable rather
// than the flag it stands for.
func TestEnvErrors(t *testing.T) {
	for _, c := range []struct {
		name, value string
		want        []string
	}{
		{"INCLUDE_USAGE", "yes", []string{`INFERMETRICS_PROXY_INCLUDE_USAGE="yes": want true or false (or 1, 0, t, f, T, F, TRUE, FALSE, True, False)`}},
		{"MAX_MODELS", "many", []string{`INFERMETRICS_PROXY_MAX_MODELS="many": want a whole number`}},
		{"MAX_MODELS", "99999999999999999999", []string{`INFERMETRICS_PROXY_MAX_MODELS="99999999999999999999": value out of range`}},
		{"MAX_MODELS", "0", []string{`INFERMETRICS_PROXY_MAX_MODELS=0: want at least 1`}},
		{"MAX_REQUEST_BODY", "-1", []string{`INFERMETRICS_PROXY_MAX_REQUEST_BODY=-1: want 0 or more`}},
		{"SHUTDOWN_TIMEOUT", "30", []string{`INFERMETRICS_PROXY_SHUTDOWN_TIMEOUT="30": want a Go duration like 30s, 1m30s or 500ms`}},
		{"IDLE_TIMEOUT", "-1s", []string{`INFERMETRICS_PROXY_IDLE_TIMEOUT=-1s: want 0 or more`}},
		{"LOG_FORMAT", "xml", []string{`INFERMETRICS_PROXY_LOG_FORMAT="xml": want text or json`}},
		{"LOG_LEVEL", "loud", []string{`INFERMETRICS_PROXY_LOG_LEVEL="loud": want debug, info, warn or error`}},
		{"DEFAULT_MODEL", OverflowModel, []string{`INFERMETRICS_PROXY_DEFAULT_MODEL="_overflow": want a model name`}},
		{"UPSTREAM_CA_FILE", "/nonexistent.pem", []string{`INFERMETRICS_PROXY_UPSTREAM_CA_FILE="/nonexistent.pem": open /nonexistent.pem`}},
		{"ROUTE", "/a={b}", []string{`INFERMETRICS_PROXY_ROUTE="/a={b}": `, `API "{b}"`}},
		{"UPSTREAM", "ftp://host", []string{`INFERMETRICS_PROXY_UPSTREAM: upstream "ftp://host": want [prefill=`}},
		{"UPSTREAM", "http://user:pw-secret@host?key=q-secret", []string{`INFERMETRICS_PROXY_UPSTREAM: upstream "http://xxxxx@host?xxxxx": user info`}},
	} {
		env := map[string]string{"INFERMETRICS_PROXY_UPSTREAM": "http://x", "INFERMETRICS_PROXY_" + c.name: c.value}
		var out bytes.Buffer
		_, err := parseConfig(nil, func(k string) string { return env[k] }, &out)
		if err == nil {
			t.Errorf("%s=%s: no error", c.name, c.value)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s=%s: error %q, want %q", c.name, c.value, err, w)
			}
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows a secret: %v", c.name, err)
		}
	}
}

// The forms the errors name are the ones the flags take: a bool's (the two
// words and the list in parentheses), a duration's (the words with a digit).
func TestEnvErrorForms(t *testing.T) {
	for _, c := range []struct {
		name, bad string
		forms     func(want string) []string
	}{
		{"INCLUDE_USAGE", "yes", func(want string) []string {
			words, list, _ := strings.Cut(want, "(or ")
			list, _, _ = strings.Cut(list, ")")
			return append(strings.Fields(strings.ReplaceAll(words, " or ", " ")), strings.Split(list, ", ")...)
		}},
		{"SHUTDOWN_TIMEOUT", "30", func(want string) []string {
			var forms []string
			for _, w := range strings.FieldsFunc(want, func(r rune) bool { return r == ' ' || r == ',' || r == '(' || r == ')' }) {
				if strings.ContainsAny(w, "0123456789") {
					forms = append(forms, w)
				}
			}
			return forms
		}},
	} {
		env := map[string]string{"INFERMETRICS_PROXY_UPSTREAM": "http://x", "INFERMETRICS_PROXY_" + c.name: c.bad}
		var out bytes.Buffer
		_, err := parseConfig(nil, func(k string) string { return env[k] }, &out)
		if err == nil {
			t.Fatalf("%s=%s: no error", c.name, c.bad)
		}
		_, want, _ := strings.Cut(err.Error(), ": want ")
		forms := c.forms(want)
		if len(forms) < 4 {
			t.Fatalf("%s: forms %q in %q", c.name, forms, err)
		}
		for _, f := range forms {
			env["INFERMETRICS_PROXY_"+c.name] = f
			if _, err := parseConfig(nil, func(k string) string { return env[k] }, &out); err != nil {
				t.Errorf("%s=%s, a form its error names: %v", c.name, f, err)
			}
		}
	}
}

// alwaysRefused is a flag.Value that refuses every value.
type alwaysRefused struct{}

func (alwaysRefused) String() string     { return "" }
func (alwaysRefused) Set(v string) error { return errors.New("refused") }

// Every kind of the flag package gets its form; a value of a flag named
// for a secret is never shown, an -upstream's is redacted.
func TestEnvErrorKinds(t *testing.T) {
	fs := flag.NewFlagSet("kinds", flag.ContinueOnError)
	fs.Bool("b", false, "")
	fs.Int("i", 0, "")
	fs.Int64("i64", 0, "")
	fs.Uint("u", 0, "")
	fs.Uint64("u64", 0, "")
	fs.Float64("f", 0, "")
	fs.Duration("d", 0, "")
	fs.Var(alwaysRefused{}, "attribute-salt", "")
	fs.Var(alwaysRefused{}, "upstream", "")
	want := map[string]string{
		"b": "want true or false", "i": "want a whole number", "i64": "want a whole number", "u": "want a whole number, 0 or more",
		"u64": "want a whole number, 0 or more", "f": "want a number", "d": "want a Go duration",
		"attribute-salt": `X="xxxxx": refused`, "upstream": `X="http://xxxxx@h?xxxxx": refused`,
	}
	fs.VisitAll(func(f *flag.Flag) {
		v := "http://u:p@h?k=v"
		err := fs.Set(f.Name, v)
		if err == nil {
			t.Fatalf("-%s %s: no error", f.Name, v)
		}
		if got := envError("X", f, v, err).Error(); !strings.Contains(got, want[f.Name]) {
			t.Errorf("-%s: %q, want %q", f.Name, got, want[f.Name])
		}
	})
}

// The provider the proxy was given is gen_ai.provider.name on the GenAI
// server and client metrics; without -provider, an upstream of one's own
// is self_hosted.
func TestProviderRecorded(t *testing.T) {
	up := stopUpstream(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-upstream", up.URL, "-provider", "anthropic"}, "anthropic"},
		{[]string{"-upstream", up.URL}, "self_hosted"},
	} {
		p := startProxy(t, nil, c.args...)
		if code, _ := post(t, p.url("/v1/chat/completions"), []byte(`{"model":"m","messages":[]}`)); code != 200 {
			t.Fatalf("status %d", code)
		}
		s := p.scrape(t)
		for _, family := range []string{"gen_ai_server_request_duration_seconds_count", "gen_ai_client_operation_duration_seconds_count"} {
			if v, _ := value(s, family, "gen_ai_provider_name", c.want); v != 1 {
				t.Errorf("%v: %s{gen_ai_provider_name=%q} = %v, want 1\n%s", c.args, family, c.want, v, grep(s, "gen_ai_provider_name"))
			}
		}
		_ = p.stop(t)
	}
}
