package pricing

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/infermetrics/infermetrics/stats"
)

// MaxFileSize bounds a price file, in bytes: LiteLLM's whole list is about
// 1.6 MB.
const MaxFileSize = 64 << 20

// maxFileSize is MaxFileSize, lowered by a test.
var maxFileSize = MaxFileSize

// ErrNotNumber reports a price that is neither a number, nor a string
// holding one, nor null.
var ErrNotNumber = errors.New("not a number")

// EntryError is the error for a bad price: it names the model and the
// field, and wraps what is wrong (ErrNotNumber, or stats.ErrNotFinite,
// stats.ErrNegative or stats.ErrOutOfRange).
type EntryError struct {
	Model, Field string
	Value        string // the field's JSON text
	Err          error
}

// Error reads `pricing: model "M": FIELD = VALUE: what is wrong`.
func (e *EntryError) Error() string {
	return fmt.Sprintf("pricing: model %q: %s = %s: %v", e.Model, e.Field, e.Value, e.Err)
}

// Unwrap returns what is wrong, for errors.Is.
func (e *EntryError) Unwrap() error { return e.Err }

// fields are the price fields of each kind, as LiteLLM names them.
var fields = [stats.NumTokenKinds]string{
	stats.TokenInput:       "input_cost_per_token",
	stats.TokenCacheRead:   "cache_read_input_token_cost",
	stats.TokenCacheWrite:  "cache_creation_input_token_cost",
	stats.TokenOutput:      "output_cost_per_token",
	stats.TokenReasoning:   "output_cost_per_reasoning_token",
	stats.TokenInputAudio:  "input_cost_per_audio_token",
	stats.TokenInputImage:  "input_cost_per_image_token",
	stats.TokenOutputAudio: "output_cost_per_audio_token",
	stats.TokenOutputImage: "output_cost_per_image_token",
}

// cacheHitField is the cache read price of the entries without
// cache_read_input_token_cost that name it so (DeepSeek's).
const cacheHitField = "input_cost_per_token_cache_hit"

// tieredKinds are the kinds a tier prices (LiteLLM's _get_token_base_cost).
var tieredKinds = [...]stats.TokenKind{stats.TokenInput, stats.TokenOutput, stats.TokenCacheRead, stats.TokenCacheWrite}

// maxThreshold bounds a tier's threshold, far above any context.
const maxThreshold = 1 << 40

// maxTiers bounds the tiers of one model: LiteLLM's list has one or two,
// and each request looks through them.
const maxTiers = 16

// Table is a price table: a Price per model name. Its methods are safe for
// concurrent use; a nil Table prices nothing.
type Table struct {
	prices map[string]*Price
	// provider holds the entries of ForProvider's provider, by their names
	// without its prefix; nil for all providers.
	provider map[string]*Price
}

// Parse reads a price table in the format of LiteLLM's
// model_prices_and_context_window.json (see the package doc). A bad price
// refuses the whole file, with an *EntryError for the first bad model in
// the order of their names.
func Parse(r io.Reader) (*Table, error) {
	data, err := io.ReadAll(io.LimitReader(r, int64(maxFileSize)+1))
	if err != nil {
		return nil, fmt.Errorf("pricing: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("pricing: a price file of more than %d bytes", maxFileSize)
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(data, &entries); err != nil || entries == nil {
		return nil, fmt.Errorf("pricing: want a JSON object of models: %v", cmp.Or(err, errors.New("null")))
	}
	t := &Table{prices: make(map[string]*Price, len(entries))}
	for _, model := range slices.Sorted(maps.Keys(entries)) { // the same error every time
		p, err := parseEntry(model, entries[model])
		if err != nil {
			return nil, err
		}
		if p != nil {
			t.prices[model] = p
		}
	}
	return t, nil
}

// Load reads the price files at paths, in order: a model in a later file
// replaces its whole entry in the earlier ones. A file that cannot be read
// or parsed refuses them all.
func Load(paths ...string) (*Table, error) {
	if len(paths) == 0 {
		return nil, errors.New("pricing: no price file")
	}
	t := &Table{prices: map[string]*Price{}}
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("pricing: %w", err)
		}
		next, err := Parse(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for model, p := range next.prices {
			t.prices[model] = p
		}
	}
	return t, nil
}

// Len returns the number of priced models.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.prices)
}

// Lookup returns the price of a request for model whose response named
// responseModel ("" if none), by the rule of the package doc, and whether
// the table has one.
func (t *Table) Lookup(model, responseModel string) (Price, bool) {
	p := t.find(model, responseModel)
	if p == nil {
		return Price{}, false
	}
	c := *p
	c.Tiers = slices.Clone(p.Tiers)
	return c, true
}

// Cost returns what a request for model, whose response named
// responseModel ("" if none), cost for tokens u, and true; or a zero Cost
// and false when the table has no price for it (see the package doc).
func (t *Table) Cost(model, responseModel string, u stats.TokenUsage) (stats.Cost, bool) {
	p := t.find(model, responseModel)
	if p == nil {
		return stats.Cost{}, false
	}
	return p.cost(&u), true
}

// parseEntry returns the price of one entry, or nil for an entry with no
// token price.
func parseEntry(model string, raw json.RawMessage) (*Price, error) {
	var entry map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entry); err != nil {
		return nil, &EntryError{Model: model, Field: "(entry)", Value: abbreviate(raw), Err: errors.New("want a JSON object")}
	}
	if model == "" || model == "sample_spec" {
		return nil, nil
	}
	if isNull(entry[fields[stats.TokenInput]]) && isNull(entry[fields[stats.TokenOutput]]) {
		return nil, nil
	}
	p := &Price{Model: model}
	for k, name := range fields {
		v, ok, err := price(model, name, entry[name])
		if err != nil {
			return nil, err
		}
		if ok {
			p.Rates.Set(stats.TokenKind(k), v)
		}
	}
	if !p.Rates.Has(stats.TokenCacheRead) {
		// Some of DeepSeek's entries name their cache read price so only.
		v, ok, err := price(model, cacheHitField, entry[cacheHitField])
		if err != nil {
			return nil, err
		}
		if ok {
			p.Rates.Set(stats.TokenCacheRead, v)
		}
	}
	// A tier is named by input_cost_per_token_above_<N>_tokens; the other
	// kinds' prices of the tier carry the same <N>, spelled alike.
	prefix := fields[stats.TokenInput] + "_above_"
	for _, key := range slices.Sorted(maps.Keys(entry)) {
		n, ok := strings.CutPrefix(key, prefix)
		if !ok {
			continue
		}
		n, ok = strings.CutSuffix(n, "_tokens")
		above, valid := threshold(n)
		if !ok || !valid {
			continue // another price (a service tier's) or a form LiteLLM reads no tier from
		}
		tier := Tier{Above: above}
		for _, k := range tieredKinds {
			field := fields[k] + "_above_" + n + "_tokens"
			v, ok, err := price(model, field, entry[field])
			if err != nil {
				return nil, err
			}
			if ok {
				tier.Rates.Set(k, v)
			}
		}
		if !tier.Rates.Has(stats.TokenInput) {
			continue // null
		}
		if len(p.Tiers) == maxTiers {
			return nil, &EntryError{Model: model, Field: key, Value: abbreviate(entry[key]), Err: fmt.Errorf("%w: more than %d tiers", stats.ErrOutOfRange, maxTiers)}
		}
		for _, other := range p.Tiers {
			if other.Above == above {
				return nil, &EntryError{Model: model, Field: key, Value: abbreviate(entry[key]), Err: fmt.Errorf("%w: a second tier above %d tokens", stats.ErrOutOfRange, above)}
			}
		}
		p.Tiers = append(p.Tiers, tier)
	}
	slices.SortFunc(p.Tiers, func(a, b Tier) int { return cmp.Compare(a.Above, b.Above) })
	return p, nil
}

// threshold parses a tier's <N> ("200k", "128000").
func threshold(n string) (int64, bool) {
	digits, thousands := strings.CutSuffix(n, "k")
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || v > maxThreshold {
		return 0, false
	}
	if thousands {
		v *= 1000
	}
	return v, true
}

// isNull reports a field absent or null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// price reads one price field: its value and whether it is set (not
// absent nor null).
func price(model, field string, raw json.RawMessage) (float64, bool, error) {
	if isNull(raw) {
		return 0, false, nil
	}
	raw = bytes.TrimSpace(raw)
	bad := func(err error) (float64, bool, error) {
		return 0, false, &EntryError{Model: model, Field: field, Value: abbreviate(raw), Err: err}
	}
	text := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return bad(ErrNotNumber)
		}
		text = strings.TrimSpace(text)
	} else if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return bad(ErrNotNumber) // true, false, an object or an array
	}
	v, err := strconv.ParseFloat(text, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return bad(ErrNotNumber)
	case math.IsNaN(v) || math.IsInf(v, 0):
		return bad(stats.ErrNotFinite)
	case v < 0:
		return bad(stats.ErrNegative)
	case v > MaxPrice:
		return bad(fmt.Errorf("%w: want at most MaxPrice (%g) per token", stats.ErrOutOfRange, MaxPrice))
	}
	return v, true, nil
}

// abbreviate returns raw for an error message, at most 64 bytes of it.
func abbreviate(raw []byte) string {
	if len(raw) > 64 {
		return strings.ToValidUTF8(string(raw[:64]), "") + "..."
	}
	return strings.ToValidUTF8(string(raw), "\uFFFD")
}
