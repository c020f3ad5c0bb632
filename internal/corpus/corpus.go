// Package corpus loads the replay corpus of recorded provider traffic
// (openaihttp/testdata/corpus, see its README) for the replay tests of
// openaihttp and infermetrics-proxy. It is test support: no program uses it.
package corpus

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
)

// Entry is one recording of the manifest, with its bodies.
type Entry struct {
	ID       string `json:"id"`
	Source   Source `json:"source"`
	Provider string `json:"provider"`
	API      string `json:"api"` // chat, completions, responses, messages, embeddings, ollama_chat, ollama_generate
	Method   string `json:"method"`
	Path     string `json:"path"` // as the client sent it, query included
	// Observed is false for a path the package does not observe (none
	// since issue 27): passed through, not recorded.
	Observed        bool              `json:"observed"`
	RequestFile     string            `json:"request_file"`
	RequestHeaders  map[string]string `json:"request_headers"`
	ModelSpan       []int             `json:"model"` // byte offsets of the top-level model value, or none
	StreamAsked     bool              `json:"stream_asked"`
	UsageAsked      bool              `json:"usage_asked"`
	ResponseFile    string            `json:"response_file"`
	Status          int               `json:"status"`
	ResponseHeaders map[string]string `json:"response_headers"`
	Encoding        string            `json:"encoding"` // identity or gzip
	Pieces          []int             `json:"pieces"`   // sizes of the writes of a realistic server
	Streamed        bool              `json:"streamed"`
	Expect          Expect            `json:"expect"`
	Tags            []string          `json:"tags"`
	Notes           []string          `json:"notes"`

	Request  []byte `json:"-"`
	Response []byte `json:"-"` // as on the wire (gzip included)
}

// Source names the recording a corpus entry was made from.
type Source struct {
	Repo        string `json:"repo"`
	Commit      string `json:"commit"`
	Path        string `json:"path"`
	Interaction int    `json:"interaction"`
}

// Expect is what replaying an entry records, computed by the converter
// from the API's documents: nil tokens for a response without usage, a nil
// cached count when it is unknown.
type Expect struct {
	Finish           string `json:"finish"`
	PromptTokens     *int64 `json:"prompt_tokens"`
	GenerationTokens *int64 `json:"generation_tokens"`
	CachedTokens     *int64 `json:"cached_tokens"`
	ContentChunks    int    `json:"content_chunks"`
	ChunksPerChoice  []int  `json:"chunks_per_choice"`
}

// Dir is the corpus directory.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "openaihttp", "testdata", "corpus")
}

// Load reads the manifest and every entry's bodies.
func Load() ([]Entry, error) {
	dir := Dir()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	var es []Entry
	if err := json.Unmarshal(b, &es); err != nil {
		return nil, err
	}
	for i := range es {
		e := &es[i]
		if e.Request, err = os.ReadFile(filepath.Join(dir, e.RequestFile)); err != nil {
			return nil, err
		}
		if e.Response, err = os.ReadFile(filepath.Join(dir, e.ResponseFile)); err != nil {
			return nil, err
		}
		n := 0
		for _, p := range e.Pieces {
			n += p
		}
		if n != len(e.Response) {
			return nil, fmt.Errorf("%s: pieces add up to %d bytes, the response has %d", e.ID, n, len(e.Response))
		}
	}
	return es, nil
}

// WithModel returns the request body with its model replaced by model, or
// unchanged when it names none.
func (e *Entry) WithModel(model string) []byte {
	if len(e.ModelSpan) != 2 {
		return e.Request
	}
	b := append([]byte{}, e.Request[:e.ModelSpan[0]]...)
	b = append(b, model...)
	return append(b, e.Request[e.ModelSpan[1]:]...)
}

// Operation is the gen_ai.operation.name of the entry's API.
func (e *Entry) Operation() string {
	switch e.API {
	case "completions", "ollama_generate":
		return "text_completion"
	case "embeddings":
		return "embeddings"
	}
	return "chat"
}

// Kind is an entry's provider, API, framing, encoding and status class:
// the replay tests write the first entry of each kind byte by byte, and
// replay it when they replay a part of the corpus (package sample).
func (e *Entry) Kind() string {
	return fmt.Sprint(e.Provider, " ", e.API, " streamed=", e.Streamed, " ", e.Encoding, " ", e.Status/100, "xx")
}

// Body is the entry's response body as sent before its Content-Encoding:
// gunzipped when gzip-encoded.
func (e *Entry) Body() ([]byte, error) {
	if e.Encoding != "gzip" {
		return e.Response, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(e.Response))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.ID, err)
	}
	return io.ReadAll(zr)
}

// Header is the response header a replaying server sends: the recorded
// Content-Type and Content-Encoding.
func (e *Entry) Header() http.Header {
	h := http.Header{}
	for _, k := range []string{"content-type", "content-encoding"} {
		if v, ok := e.ResponseHeaders[k]; ok {
			h.Set(k, v)
		}
	}
	return h
}

// RequestHeader is the request header a replaying client sends: the
// recorded Content-Type, Accept and Accept-Encoding.
func (e *Entry) RequestHeader() http.Header {
	h := http.Header{}
	for k, v := range e.RequestHeaders {
		h.Set(k, v)
	}
	return h
}

// Split is a way to cut a response into writes.
type Split int

const (
	Realistic Split = iota // one write per SSE event or NDJSON line, or per flushed gzip block
	Random                 // pieces of 1 to 64 bytes from a fixed seed
	Bytes                  // one byte per write
)

func (s Split) String() string {
	return [...]string{"realistic", "random", "bytes"}[s]
}

// Writes returns the response cut as split says.
func (e *Entry) Writes(split Split) [][]byte {
	var out [][]byte
	b := e.Response
	switch split {
	case Realistic:
		for _, n := range e.Pieces {
			out = append(out, b[:n])
			b = b[n:]
		}
	case Random:
		r := rand.New(rand.NewPCG(uint64(len(b)), 25))
		for len(b) > 0 {
			n := min(1+r.IntN(64), len(b))
			out = append(out, b[:n])
			b = b[n:]
		}
	case Bytes:
		for i := range b {
			out = append(out, b[i:i+1])
		}
	}
	return out
}

// Reader returns the response cut as split says, each Read returning at
// most one of its writes: a body read as a server wrote it.
func (e *Entry) Reader(split Split) io.Reader { return &writesReader{w: e.Writes(split)} }

type writesReader struct{ w [][]byte }

func (r *writesReader) Read(b []byte) (int, error) {
	for len(r.w) > 0 && len(r.w[0]) == 0 {
		r.w = r.w[1:]
	}
	if len(r.w) == 0 {
		return 0, io.EOF
	}
	n := copy(b, r.w[0])
	r.w[0] = r.w[0][n:]
	return n, nil
}

// Explain names the known defects (issue 25's list) an entry's tags point
// to, for a failure message; "" when none.
func (e *Entry) Explain() string {
	s := ""
	for _, t := range e.Tags {
		if why, ok := defects[t]; ok {
			s += " [" + why + "]"
		}
	}
	return s
}

var defects = map[string]string{
	"several_choices":                 "defect 7: non-streamed several choices take the worst finish reason",
	"several_choices_streamed":        "defect 4: inter-token gaps of several choices",
	"data_lines_crlf":                 "defect 5: SSE data split over \\r\\n lines",
	"request_bom":                     "defect 6: request body with a UTF-8 BOM",
	"usage_without_completion_tokens": "defect 8: usage without completion_tokens counts its prompt tokens",
	"cached_above_prompt":             "defect 9: cached_tokens > prompt_tokens: prompt and generation counted, cached unknown",
}
