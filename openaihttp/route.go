package openaihttp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// api is an API observed, by the name a Route gives it; apiNone is a
// route whose requests pass through unrecorded.
type api uint8

const (
	apiNone api = iota
	apiChat
	apiCompletions
	apiResponses
	apiMessages
	apiEmbeddings
	apiPooling
	apiOllamaChat
	apiOllamaGenerate
	apiOllamaEmbed
)

// apis are the names of the APIs (NewRoute's) and their endpoints.
var apis = [...]struct {
	name string
	ep   endpoint
}{
	apiNone:           {"none", endpoint{}},
	apiChat:           {"chat", endpoint{stats.OperationChat, dOpenAI}},
	apiCompletions:    {"completions", endpoint{stats.OperationTextCompletion, dOpenAI}},
	apiResponses:      {"responses", endpoint{stats.OperationChat, dResponses}},
	apiMessages:       {"messages", endpoint{stats.OperationChat, dAnthropic}},
	apiEmbeddings:     {"embeddings", endpoint{stats.OperationEmbeddings, dOpenAI}},
	apiPooling:        {"pooling", endpoint{stats.OperationPooling, dOpenAI}},
	apiOllamaChat:     {"ollama_chat", endpoint{stats.OperationChat, dOllama}},
	apiOllamaGenerate: {"ollama_generate", endpoint{stats.OperationTextCompletion, dOllama}},
	apiOllamaEmbed:    {"ollama_embed", endpoint{stats.OperationEmbeddings, dOllamaEmbed}},
}

// APIs returns the names of the APIs a Route maps a path to: chat (chat
// completions), completions, responses (the Responses API), messages
// (Anthropic Messages), embeddings, pooling (vLLM's pooling endpoints),
// ollama_chat, ollama_generate, ollama_embed (Ollama's native API: its
// /api/embed and legacy /api/embeddings), and none (passed through
// unrecorded).
func APIs() []string {
	names := make([]string, 0, len(apis))
	for _, a := range apis[1:] {
		names = append(names, a.name)
	}
	return append(names, apis[apiNone].name)
}

// bases are the base paths the package knows to name no client's data
// (providers' base URLs), longest first: a route's pattern keeps the one
// that ends the part of a path before the API's segments, and writes
// /{prefix...} for anything before it. {deployment} (Azure OpenAI's) is the
// model when the body names none.
var bases = [...]string{
	"/openai/deployments/{deployment}", // Azure OpenAI
	"/api/paas/v4",                     // Z.ai
	"/v1beta/openai",                   // Gemini's OpenAI compatibility
	"/openai/v1",                       // Azure OpenAI v1 API, Groq
	"/api/v1",                          // OpenRouter
	"/openai",                          // Azure OpenAI (api-version)
	"/models",                          // Azure AI Foundry Models
	"/v1",                              // OpenAI, vLLM, SGLang, llama.cpp, Ollama, Mistral, ...
	"",                                 // DeepSeek, Perplexity, LiteLLM; Anthropic's /v1/messages
}

// prefixWildcard stands for the segments of a path before a known base.
const prefixWildcard = "/{prefix...}"

// maxSegments bounds the segments of a route's pattern, and so the
// segments of a path a route reads (its first and its last maxSegments).
const maxSegments = 16

// builtin are the package's own patterns, split in segments: each
// endpoint's suffix, each base, and the pattern of each pairing (with and
// without the prefix wildcard), the handler label of a request they match.
var builtin = func() (b struct {
	suffixes [len(endpoints)][]string
	bases    [len(bases)][]string
	labels   [len(bases)][len(endpoints)][2]string
}) {
	for i, e := range endpoints {
		b.suffixes[i] = split(e.suffix)
	}
	for i, base := range bases {
		b.bases[i] = split(base)
		for j, e := range endpoints {
			b.labels[i][j] = [2]string{base + e.suffix, prefixWildcard + base + e.suffix}
		}
	}
	return b
}()

// split returns a pattern's segments.
func split(pattern string) []string {
	return strings.FieldsFunc(pattern, func(r rune) bool { return r == '/' })
}

// A Route maps the requests whose path matches its pattern to an API (see
// NewRoute and WithRoutes). The zero Route matches nothing.
type Route struct {
	pattern string
	before  []string // the segments before a {name...} wildcard, all of them without one
	after   []string // the segments after it
	multi   string   // the {name...} wildcard's name, "" when none
	api     api
}

// NewRoute returns the route of the paths that match pattern to the API
// named api (one of APIs()). A pattern is a path of at most 16 segments; a
// segment {name} matches any one segment, and one segment {name...} any
// number of them, none included. A wildcard named model or deployment (one
// per pattern) gives the model of a request whose body names none, its
// segments joined by "/". A path matches with or without a trailing slash,
// doubled slashes counting as one; literal segments are compared as they
// are, case included. The pattern is the handler label of the HTTP families
// for the requests it matches (WithHTTPMetrics): a wildcard keeps what a
// client put in a path out of the labels.
//
//	openaihttp.NewRoute("/serving/{model}/v1/chat", "chat")
func NewRoute(pattern, api string) (Route, error) {
	r := Route{pattern: pattern}
	a, ok := apiNamed(api)
	if !ok {
		return Route{}, fmt.Errorf("openaihttp: route %q: API %q is not one of %s", pattern, api, strings.Join(APIs(), ", "))
	}
	r.api = a
	if !strings.HasPrefix(pattern, "/") || strings.ContainsAny(pattern, "?#") {
		return Route{}, fmt.Errorf("openaihttp: route %q: a pattern is a path starting with /, without a query", pattern)
	}
	segs := split(pattern)
	if len(segs) > maxSegments {
		return Route{}, fmt.Errorf("openaihttp: route %q: more than %d segments", pattern, maxSegments)
	}
	names := map[string]bool{}
	r.before = segs
	for i, s := range segs {
		if !strings.ContainsAny(s, "{}") {
			continue
		}
		name, multi, err := wildcard(s)
		if err == nil && names[name] {
			err = fmt.Errorf("wildcard {%s} twice", name)
		}
		if err == nil && multi && r.multi != "" {
			err = errors.New("more than one {name...} wildcard")
		}
		if err == nil && isModel(name) && (names["model"] || names["deployment"]) {
			err = errors.New("more than one wildcard naming the model")
		}
		if err != nil {
			return Route{}, fmt.Errorf("openaihttp: route %q: %w", pattern, err)
		}
		names[name] = true
		if multi {
			r.multi, r.before, r.after = name, segs[:i], segs[i+1:]
		}
	}
	return r, nil
}

// wildcard parses a segment {name} or {name...}.
func wildcard(seg string) (name string, multi bool, err error) {
	if len(seg) < 2 || seg[0] != '{' || seg[len(seg)-1] != '}' {
		return "", false, fmt.Errorf("segment %q: a wildcard is a whole segment, {name} or {name...}", seg)
	}
	name, multi = strings.CutSuffix(seg[1:len(seg)-1], "...")
	for i, c := range name {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return "", false, fmt.Errorf("segment %q: a wildcard's name is a Go identifier", seg)
		}
	}
	if name == "" {
		return "", false, fmt.Errorf("segment %q: a wildcard needs a name", seg)
	}
	return name, multi, nil
}

func apiNamed(name string) (api, bool) {
	for i, a := range apis {
		if a.name == name {
			return api(i), true
		}
	}
	return apiNone, false
}

// Pattern returns the route's pattern.
func (r Route) Pattern() string { return r.pattern }

// API returns the name of the route's API.
func (r Route) API() string { return apis[r.api].name }

// route is what a request's path tells: the API it is sent to, the pattern
// of the route it matched (its handler label) and the model the path names
// ("" for none).
type route struct {
	api     api
	pattern string
	model   string
}

// routeOf returns the route of a path: the first of routes it matches, else
// the package's own: the endpoint whose suffix its final segments are (see
// RecordedPaths). ok is false when none matches.
func routeOf(path string, routes []Route) (rt route, ok bool) {
	var s segments
	s.read(path)
	for i := range routes {
		if model, ok := s.match(&routes[i]); ok {
			return route{api: routes[i].api, pattern: routes[i].pattern, model: model}, true
		}
	}
	for i := range endpoints {
		suffix := builtin.suffixes[i]
		at := s.n - len(suffix)
		if at < 0 {
			continue
		}
		if _, ok := s.matchAt(suffix, at); !ok {
			continue
		}
		for j, base := range builtin.bases {
			from := at - len(base)
			if from < 0 {
				continue
			}
			if model, ok := s.matchAt(base, from); ok {
				prefixed := 0
				if from > 0 {
					prefixed = 1
				}
				return route{api: endpoints[i].api, pattern: builtin.labels[j][i][prefixed], model: model}, true
			}
		}
	}
	return route{}, false
}

// segments are the segments of a path, empty ones (a doubled or trailing
// slash) left out: the first and the last maxSegments of them, as offsets
// in the path, which is all a pattern reads.
type segments struct {
	path       string
	n          int
	head, tail [maxSegments][2]int // tail holds segment i at i % maxSegments
}

func (s *segments) read(path string) {
	s.path = path
	for i := 0; i < len(path); {
		if path[i] == '/' {
			i++
			continue
		}
		j := i + strings.IndexByte(path[i:], '/')
		if j < i {
			j = len(path)
		}
		if s.n < maxSegments {
			s.head[s.n] = [2]int{i, j}
		}
		s.tail[s.n%maxSegments] = [2]int{i, j}
		s.n++
		i = j
	}
}

// span returns the offsets of segment i, which must be held.
func (s *segments) span(i int) [2]int {
	if i < maxSegments {
		return s.head[i]
	}
	return s.tail[i%maxSegments]
}

func (s *segments) seg(i int) string {
	sp := s.span(i)
	return s.path[sp[0]:sp[1]]
}

// matchAt reports whether the segments of a pattern without a {name...}
// wildcard match the path's from segment i on, and the model a {model} or
// {deployment} wildcard names.
func (s *segments) matchAt(pattern []string, i int) (model string, ok bool) {
	for k, p := range pattern {
		seg := s.seg(i + k)
		if p[0] != '{' {
			if seg != p {
				return "", false
			}
			continue
		}
		if name := p[1 : len(p)-1]; isModel(name) {
			model = seg
		}
	}
	return pathModel(model), true
}

// match reports whether a path matches a route, and the model it names.
func (s *segments) match(r *Route) (model string, ok bool) {
	if r.pattern == "" {
		return "", false
	}
	if r.multi == "" {
		if s.n != len(r.before) {
			return "", false
		}
		return s.matchAt(r.before, 0)
	}
	rest := s.n - len(r.after)
	if rest < len(r.before) {
		return "", false
	}
	m1, ok := s.matchAt(r.before, 0)
	if !ok {
		return "", false
	}
	m2, ok := s.matchAt(r.after, rest)
	if !ok {
		return "", false
	}
	switch {
	case isModel(r.multi) && rest > len(r.before):
		model = s.path[s.span(len(r.before))[0]:s.span(rest - 1)[1]]
		if strings.Contains(model, "//") {
			model = strings.Join(split(model), "/") // doubled slashes count as one
		}
		model = pathModel(model)
	case m1 != "":
		model = m1
	default:
		model = m2
	}
	return model, true
}

// isModel reports a wildcard whose segment is the request's model.
func isModel(name string) bool { return name == "model" || name == "deployment" }

// pathModel returns a model named by a path, "" when it is longer than a
// model name may be (as a body's model).
func pathModel(m string) string {
	if len(m) > instrument.MaxModelNameLen {
		return ""
	}
	return m
}
