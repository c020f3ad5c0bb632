package openaihttp

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/infermetrics/infermetrics/internal/corpus"
	"github.com/infermetrics/infermetrics/internal/sample"
)

// The oracle of the fuzz targets: what a straightforward decode with
// encoding/json tells of the same bytes, read by Python's rules where they
// differ from Go's, as vLLM's server and OpenAI's Python client read them.

// member is a member of a decoded JSON object; object keeps them all, in
// order, duplicates too.
type member struct {
	key string
	val any
}

type object []member

// get returns the last member named key, as Python's dict keeps the last
// of duplicate keys.
func (o object) get(key string) (any, bool) {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].key == key {
			return o[i].val, true
		}
	}
	return nil, false
}

// pyDepth is about where Python's json refuses nesting (its recursion
// limit, 1,000 by default, less the caller's frames).
const pyDepth = 900

// pyLoads decodes b as Python's json.loads decodes bytes, into strings,
// json.Numbers, bools, nil, []any and objects: past one leading UTF-8 byte
// order mark, accepting NaN, Infinity and -Infinity (decoded as the
// number 1.5: like them, neither an integer nor a count). ok is false
// where Python refuses b: not UTF-8, not one JSON value, nested too deep.
func pyLoads(b []byte) (v any, ok bool) {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	if !utf8.Valid(b) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(pyLiterals(b)))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // extra data
	}
	return v, true
}

// decodeValue decodes the next value of dec, objects as object.
func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > pyDepth {
		return nil, io.ErrUnexpectedEOF
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		o := object{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			o = append(o, member{k.(string), v})
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := decodeValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return t, nil
}

// pyLiterals replaces the literals NaN, Infinity and -Infinity that stand
// as values outside strings with 1.5, for encoding/json.
func pyLiterals(b []byte) []byte {
	var out []byte
	in, esc, last := false, false, 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case in:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				in = false
			}
			continue
		case c == '"':
			in = true
			continue
		}
		for _, lit := range []string{"NaN", "Infinity", "-Infinity"} {
			end := i + len(lit)
			if !bytes.HasPrefix(b[i:], []byte(lit)) || (i > 0 && !strings.ContainsRune(" \t\r\n:[,", rune(b[i-1]))) ||
				(end < len(b) && !strings.ContainsRune(" \t\r\n,]}", rune(b[end]))) {
				continue
			}
			out = append(append(out, b[last:i]...), "1.5"...)
			last, i = end, end-1
			break
		}
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// pyCount reads a usage count as the observer documents it: a non-negative
// JSON integer within maxCount (ok), one above (huge), anything else bad.
func pyCount(v any) (n int64, ok, huge bool) {
	num, isNum := v.(json.Number)
	if !isNum || len(num) == 0 || strings.Trim(string(num), "0123456789") != "" {
		return 0, false, false
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil || n > maxCount {
		return 0, false, true
	}
	return n, true, false
}

// pyParam reads n or max_tokens as pydantic's lax int, as doc.go says: an
// integer, a float with no fraction, a string of digits, a bool; 0 for a
// value refused or above maxCount (dropped).
func pyParam(v any) int64 {
	switch v := v.(type) {
	case bool:
		if v {
			return 1
		}
	case string:
		if n, ok, _ := pyCount(json.Number(v)); ok {
			return n
		}
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if (err == nil || isRange(err)) && f >= 0 && f == math.Trunc(f) && f <= maxCount {
			return int64(f)
		}
	}
	return 0
}

// pyBool reads a bool as pydantic's lax bool: ok is false for a value it
// refuses; null is None, which an optional bool takes (false).
func pyBool(v any) (value, ok bool) {
	switch v := v.(type) {
	case nil:
		return false, true
	case bool:
		return v, true
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		return err == nil && f == 1, err == nil && (f == 0 || f == 1)
	case string:
		switch strings.ToLower(v) {
		case "1", "on", "t", "true", "y", "yes":
			return true, true
		case "0", "off", "f", "false", "n", "no":
			return false, true
		}
	}
	return false, false
}

// pyTrue reads a bool as pydantic's lax bool, true only for a value that
// is one.
func pyTrue(v any) bool {
	b, _ := pyBool(v)
	return b
}

// FuzzSeeds is fuzzSeeds, for the fuzz seeds of package openaihttp_test.
var FuzzSeeds = fuzzSeeds

// fuzzSeeds are the files under testdata that seed the fuzz targets: every
// fixture, and the request and response of the replay corpus's entries
// that sample.Of keeps (the first of each provider, API, framing, encoding
// and status class, and every sample.Every-th). Seeded with the whole
// corpus (1,417 seeds), a target spent the whole 15 s scripts/test.sh then
// gave it gathering their baseline coverage, with no time left for new
// inputs; TestCorpus replays the whole corpus.
func fuzzSeeds(tb testing.TB) [][]byte { return testdataFiles(tb, false) }

// testdataFiles returns every file under testdata, recursively, but the
// fuzzers' own corpus under testdata/fuzz, and of the recorded corpus
// (testdata/corpus) the bodies of its entries: all of them when
// wholeCorpus, else those sample.Of keeps.
func testdataFiles(tb testing.TB, wholeCorpus bool) [][]byte {
	var seeds [][]byte
	err := filepath.WalkDir("testdata", func(path string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case e.IsDir() && path == filepath.Join("testdata", "fuzz"):
			return filepath.SkipDir
		case e.IsDir() && path == filepath.Join("testdata", "corpus"):
			return filepath.SkipDir // its bodies, below
		case e.IsDir():
			return nil
		}
		b, err := os.ReadFile(path)
		seeds = append(seeds, b)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	es, err := corpus.Load()
	if err != nil {
		tb.Fatal(err)
	}
	if !wholeCorpus {
		es = sample.Of(es, (*corpus.Entry).Kind)
	}
	for _, e := range es {
		seeds = append(seeds, e.Request, e.Response)
	}
	return seeds
}
