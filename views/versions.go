package views

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/infermetrics/infermetrics/instrument"
)

// LegacyFamily is a family an older vLLM exported that a later one renamed
// and then hid and removed, or removed without a successor. A renamed one
// is a second stream of the instrument of the family that replaced it
// (Family.Instrument): the same measurements, so the same values, labels
// and buckets, under the old name; one without a successor has an
// instrument of its own (instrument.LegacyDescriptors).
type LegacyFamily struct {
	Family
	// Replacement is the family that replaced it; empty for none.
	Replacement string
	// Added is the first vLLM version that exported it, empty for one the
	// V1 engine had from its start (0.9); Deprecated the version that
	// deprecated it; Hidden the first version that exported it only with
	// --show-hidden-metrics-for-version=<the version before>; Removed when
	// vLLM deleted it. Changes names the vLLM pull requests.
	Added, Deprecated, Hidden, Removed, Changes string
}

// legacy is one row of the table of legacy families: the one place that
// says what each is, the rest derives from its instrument.
type legacy struct {
	name       string // stream name, as VLLMName gives one
	instrument string
	description,
	added, deprecated, hidden, removed, changes string
}

// legacyFamilies are the families vLLM V1 exported from 0.9 on that it has
// since renamed, hidden and removed, as vllm/v1/metrics/loggers.py defined
// them (docs/metrics.md names the code read). Each was incremented or
// observed with exactly the values of its replacement: gpu_cache_usage_perc
// was set from scheduler_stats.kv_cache_usage like kv_cache_usage_perc, the
// gpu_prefix_cache counters added prefix_cache_stats.queries and .hits like
// prefix_cache_queries and _hits, and time_per_output_token_seconds observed
// each output's gap to the request's previous output (IterationStats'
// time_per_output_tokens_iter, renamed inter_token_latencies_iter by #24110),
// with the inter-token latency buckets.
var legacyFamilies = []legacy{
	{name: "vllm:gpu_cache_usage_perc", instrument: instrument.NameKVCacheUsage,
		description: "GPU KV-cache usage, from 0 to 1: vllm:kv_cache_usage_perc under vLLM's name before 0.9.2.",
		deprecated:  "0.9.2", hidden: "0.11", removed: "0.12", changes: "#18354 (deprecated), #29330 (removed)"},
	{name: "vllm:gpu_prefix_cache_queries", instrument: instrument.NamePrefixCacheQueries,
		description: "GPU prefix cache queries, in tokens: vllm:prefix_cache_queries_total under vLLM's name before 0.9.2.",
		deprecated:  "0.9.2", hidden: "0.11", removed: "0.12", changes: "#18354 (deprecated), #29330 (removed)"},
	{name: "vllm:gpu_prefix_cache_hits", instrument: instrument.NamePrefixCacheHits,
		description: "GPU prefix cache hits, in tokens: vllm:prefix_cache_hits_total under vLLM's name before 0.9.2.",
		deprecated:  "0.9.2", hidden: "0.11", removed: "0.12", changes: "#18354 (deprecated), #29330 (removed)"},
	{name: "vllm:time_per_output_token_seconds", instrument: instrument.NameInterTokenLatency,
		description: "Time between consecutive outputs of a request: vllm:inter_token_latency_seconds under vLLM's name before 0.11.",
		deprecated:  "0.11", hidden: "0.12", removed: "after 0.13", changes: "#24110 (deprecated), #29330 (hidden), #32661 (removed)"},
	// Added by #33290 (approved 2026-02-03) and removed without deprecation
	// by #38709 (merged 2026-04-01): the releases between are 0.16 to 0.18
	// (docs/metrics.md says how they were dated, and the code read).
	{name: "vllm:prompt_tokens_recomputed", instrument: instrument.NamePromptTokensRecomputed,
		description: "Cached prompt tokens recomputed for the forward pass, one per request whose whole prompt but " +
			"the last token was cached: vLLM 0.16 to 0.18 (vllm:prompt_tokens_cached_total counts them as computed).",
		added: "0.16", removed: "0.19", changes: "#33290 (added), #38709 (removed)"},
}

// oldestVersion is the oldest vLLM version WithVersion takes: the V1
// engine's families from 0.9 on are the ones read (docs/metrics.md).
var oldestVersion = version{0, 9}

// LegacyFamilies returns every family of an older vLLM that WithVersion
// can export again, in a stable order.
func LegacyFamilies() []LegacyFamily {
	out := make([]LegacyFamily, 0, len(legacyFamilies))
	for _, l := range legacyFamilies {
		out = append(out, l.family())
	}
	return out
}

// family returns the LegacyFamily of a row, from its instrument's
// descriptor: a current family's, whose family replaced it, or one of its
// own.
func (l legacy) family() LegacyFamily {
	var d instrument.Descriptor
	var replacement string
	for _, x := range instrument.Descriptors() {
		if x.Name == l.instrument {
			d, replacement = x, exposedName(VLLMName(x), x.Kind)
		}
	}
	for _, x := range instrument.LegacyDescriptors() {
		if x.Name == l.instrument {
			d = x
		}
	}
	d.Description = l.description
	return LegacyFamily{
		Family:      Family{Name: exposedName(l.name, d.Kind), Type: d.Kind.String(), Labels: labels(d), Buckets: d.Buckets, Instrument: d},
		Replacement: replacement,
		Added:       l.added, Deprecated: l.deprecated, Hidden: l.hidden, Removed: l.removed, Changes: l.changes,
	}
}

// WithVersion also exports the families vLLM v exported by default that
// later versions renamed or removed, as v did: for 0.9 and 0.10
// vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_queries_total,
// vllm:gpu_prefix_cache_hits_total and vllm:time_per_output_token_seconds;
// for 0.11 vllm:time_per_output_token_seconds (what vLLM 0.12 gave with
// --show-hidden-metrics-for-version=0.11); for 0.16 to 0.18
// vllm:prompt_tokens_recomputed_total; none for 0.12 to 0.15 and from 0.19
// (LegacyFamilies lists them, with the versions). Every current family
// stays.
//
// v is a version as vLLM reports it (vllm.__version__, PEP 440): a release
// of two numbers or more ("0.10", "0.10.2", "0.10.1.1"), then optionally a
// pre-release (a, b or rc and a number: "0.11.0rc2"), a post-release
// (".post1"), a development release (".dev364") and a local version ("+cu128",
// "+gb432b7a28.d20250625"), and a leading "v" as in vLLM's git tags
// ("v0.10.0"). Its minor version decides: "0.10.2rc1+cu128" is 0.10.
// The empty string asks for no older families, as leaving the option out
// does (a flag or environment variable left unset). Anything else and
// versions before 0.9 (the V0 engine's families) are refused with ErrOption. The legacy families take WithBuckets,
// WithAttributes and WithExponential like the others.
func WithVersion(v string) Option {
	return optionFunc(func(c *config) { c.version = v })
}

// version is a vLLM minor version: the families changed only between minors.
type version struct{ major, minor int }

// maxVersionLen bounds what parseVersion reads: vLLM's longest versions (a
// development release with a commit, a date and a device) are under 50 bytes.
const maxVersionLen = 128

// parseVersion reads a PEP 440 version in its canonical form
// (N.N[.N...][{a|b|rc}N][.postN][.devN][+local]), a leading "v" allowed,
// and returns its major and minor version.
func parseVersion(s string) (version, bool) {
	if len(s) > maxVersionLen {
		return version{}, false
	}
	s = strings.TrimPrefix(s, "v")
	var n [2]int
	var ok bool
	for i := 0; ; i++ {
		var num string
		if num, s, ok = cutNumber(s); !ok {
			return version{}, false
		}
		if i < len(n) {
			x, err := strconv.Atoi(num)
			if err != nil {
				return version{}, false
			}
			n[i] = x
		}
		rest, more := strings.CutPrefix(s, ".")
		if !more || !startsWithDigit(rest) {
			if i == 0 {
				return version{}, false // no minor version
			}
			break
		}
		s = rest
	}
	for _, pre := range []string{"rc", "a", "b"} {
		if rest, found := strings.CutPrefix(s, pre); found {
			if _, s, ok = cutNumber(rest); !ok {
				return version{}, false
			}
			break
		}
	}
	for _, tag := range []string{".post", ".dev"} {
		if rest, found := strings.CutPrefix(s, tag); found {
			if _, s, ok = cutNumber(rest); !ok {
				return version{}, false
			}
		}
	}
	if local, found := strings.CutPrefix(s, "+"); found {
		for _, part := range strings.Split(local, ".") {
			if part == "" || strings.ContainsFunc(part, func(r rune) bool {
				return !('0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
			}) {
				return version{}, false
			}
		}
		s = ""
	}
	return version{n[0], n[1]}, s == ""
}

// cutNumber cuts a PEP 440 number (digits, no leading zero) off the front of
// s and returns it and the rest.
func cutNumber(s string) (num, rest string, ok bool) {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 1 && s[0] == '0' {
		return "", s, false
	}
	return s[:i], s[i:], true
}

// startsWithDigit reports whether s begins with an ASCII digit.
func startsWithDigit(s string) bool { return s != "" && '0' <= s[0] && s[0] <= '9' }

func (v version) less(w version) bool {
	return v.major < w.major || v.major == w.major && v.minor < w.minor
}

// exportedBy reports whether vLLM v exported the family by default: every
// version from the one that added it to the one before the one that hid
// it, or removed it when it was never hidden.
func (l legacy) exportedBy(v version) bool {
	until := l.hidden
	if until == "" {
		until = l.removed
	}
	end, _ := parseVersion(until)
	if added, ok := parseVersion(l.added); ok && v.less(added) {
		return false
	}
	return v.less(end)
}

// legacyOf returns the legacy families of the configured version; an error
// matching ErrOption for a version WithVersion does not take.
func (c *config) legacyOf() ([]legacy, error) {
	s := c.version
	if s == "" {
		return nil, nil
	}
	v, ok := parseVersion(s)
	if !ok {
		shown := fmt.Sprintf("%q", s)
		if len(s) > maxVersionLen {
			shown = fmt.Sprintf("%q... (%d bytes)", s[:maxVersionLen], len(s))
		}
		return nil, fmt.Errorf("%w: WithVersion(%s): want a vLLM version (PEP 440) such as \"0.10\", \"0.10.2\" or \"0.10.2rc1+cu128\"",
			ErrOption, shown)
	}
	if v.less(oldestVersion) {
		return nil, fmt.Errorf("%w: WithVersion(%q): vLLM before %d.%d (the V0 engine's families) is not modelled; "+
			"the oldest version is \"%d.%d\"", ErrOption, s, oldestVersion.major, oldestVersion.minor,
			oldestVersion.major, oldestVersion.minor)
	}
	var out []legacy
	for _, l := range legacyFamilies {
		if l.exportedBy(v) {
			out = append(out, l)
		}
	}
	return out, nil
}
