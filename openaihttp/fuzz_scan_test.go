package openaihttp

import (
	"strings"
	"testing"
)

// FuzzRequestScan reads any request body with the request scanner and
// requires what Python's json and vLLM's pydantic models read of it, where
// they read it (a JSON object): the model (a string of at most 256 bytes,
// else ""), stream and stream_options.include_usage as lax bools (an
// include_usage that is none counting as asked: left to the server), n and
// max_tokens as lax ints (max_completion_tokens winning over max_tokens
// when set, as vLLM reads them; max_output_tokens for the Responses API),
// the last of duplicate keys winning, past one leading byte order mark; and
// the end-user identifiers, "user" and "metadata.user_id", when strings,
// cut to maxUser bytes.
func FuzzRequestScan(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	for _, b := range []string{
		`{"model":"m","stream":"yes","n":2.0,"max_tokens":"7","stream_options":{"include_usage":1}}`,
		"\xef\xbb\xbf" + `{"model":"m","n":NaN,"max_tokens":Infinity,"stream":-Infinity}`,
		`{"model":"a","model":"b","stream":true,"stream":false}`,
		`{"model":"m\u00e9","max_tokens":1e2,"stream_options":null}`,
		`{"stream":"Y","stream_options":{"include_usage":"maybe"}}`,
		`{"stream":1.0,"stream_options":{"include_usage":[]}}`,
		`{"stream":"on","stream_options":{"include_usage":null}}`,
		`{"user":"u\u00e9","metadata":{"user_id":"a"},"user":7}`,
		`{"metadata":{"user_id":"a"},"metadata":{"x":1},"user":"` + strings.Repeat("y", 300) + `"}`,
		`{"metadata":[{"user_id":"a"}],"user":null}`,
	} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var s jsonScan
		scanRequest(&s, body, cRequest)
		v, ok := pyLoads(body)
		root, isObject := v.(object)
		if !ok || !isObject {
			return // vLLM answers 400: anything goes, but a panic
		}
		var want struct {
			model                string
			stream, includeUsage bool
			n, maxTokens         int64
			user, userID         string
		}
		cut := func(v any) string {
			u, _ := v.(string)
			return u[:min(len(u), maxUser)]
		}
		if u, ok := root.get("user"); ok {
			want.user = cut(u)
		}
		if m, ok := root.get("metadata"); ok {
			if m, ok := m.(object); ok {
				if u, ok := m.get("user_id"); ok {
					want.userID = cut(u)
				}
			}
		}
		if m, ok := root.get("model"); ok {
			if m, ok := m.(string); ok && len(m) <= maxValue {
				want.model = m
			}
		}
		if v, ok := root.get("stream"); ok {
			want.stream = pyTrue(v)
		}
		if v, ok := root.get("n"); ok {
			want.n = pyParam(v)
		}
		for _, k := range []string{"max_tokens", "max_output_tokens", "max_completion_tokens"} {
			if v, ok := root.get(k); ok && pyParam(v) != 0 {
				want.maxTokens = pyParam(v)
			}
		}
		if o, ok := root.get("stream_options"); ok {
			if o, ok := o.(object); ok {
				if v, ok := o.get("include_usage"); ok {
					b, isBool := pyBool(v)
					want.includeUsage = b || !isBool // no bool: the server's to refuse, not asked again
				}
			}
		}
		rq := &s.req
		got := want
		got.model, got.stream, got.includeUsage = string(s.model[:s.modelLen]), rq.hasStream && rq.stream, rq.includeUsage
		got.n, got.maxTokens = rq.n, rq.maxTokensParam()
		got.user, got.userID = string(s.user[:s.userLen]), string(s.userID[:s.userIDLen])
		if got != want {
			t.Errorf("%q:\nscanned %+v\nwant    %+v", body, got, want)
		}
	})
}
