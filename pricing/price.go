package pricing

import (
	"math"

	"github.com/infermetrics/infermetrics/stats"
)

// MaxPrice bounds a price, per token, in the table's currency: $1 a token
// is over 1,600 times o1-pro's output price in LiteLLM's list ($0.0006), so
// a price above it is a mistake in the file (a price per million tokens
// written as per token, a stray exponent).
const MaxPrice = 1.0

// Rates are per-token prices by token kind, each with whether the entry
// gave it, in the shape of stats.TokenUsage.
type Rates struct {
	PerToken [stats.NumTokenKinds]float64
	Known    uint16 // bit 1<<k for each priced stats.TokenKind k
}

// Set records v as the price of one token of kind k.
func (r *Rates) Set(k stats.TokenKind, v float64) {
	if int(k) < stats.NumTokenKinds {
		r.PerToken[k], r.Known = v, r.Known|1<<k
	}
}

// Get returns the price of one token of kind k and whether the entry gave
// it.
func (r Rates) Get(k stats.TokenKind) (float64, bool) {
	if int(k) >= stats.NumTokenKinds || r.Known&(1<<k) == 0 {
		return 0, false
	}
	return r.PerToken[k], true
}

// Has reports whether the entry gave a price of kind k.
func (r Rates) Has(k stats.TokenKind) bool {
	_, ok := r.Get(k)
	return ok
}

// whole returns the kind that k is a part of, for its price when the entry
// has none of k's own.
func whole(k stats.TokenKind) (stats.TokenKind, bool) {
	switch k {
	case stats.TokenCacheRead, stats.TokenCacheWrite, stats.TokenInputAudio, stats.TokenInputImage:
		return stats.TokenInput, true
	case stats.TokenReasoning, stats.TokenOutputAudio, stats.TokenOutputImage:
		return stats.TokenOutput, true
	}
	return 0, false
}

// Tier is a price tier of a model: its prices apply to a request whose
// prompt has more than Above tokens.
type Tier struct {
	Above int64
	// Rates holds the tier's own prices, of the input, output, cache read
	// and cache write kinds; a kind it lacks keeps the base price.
	Rates Rates
}

// Price is one model's entry of a Table.
type Price struct {
	// Model is the entry's name in the table (the name that matched).
	Model string
	// Rates are the base prices.
	Rates Rates
	// Tiers are the tiers, in increasing order of Above.
	Tiers []Tier
}

// Rate returns the price of one token of kind k in a request whose prompt
// (input, cache reads and cache writes) has prompt tokens: the tier's, the
// base price, or the price of k's whole, as the package doc says.
func (p Price) Rate(k stats.TokenKind, prompt int64) float64 {
	if int(k) >= stats.NumTokenKinds {
		return 0
	}
	return p.effective(prompt)[k]
}

// effective returns the price of one token of each kind in a request whose
// prompt has prompt tokens: the base prices overlaid by those of the
// highest tier below prompt, then each kind without a price at its
// whole's.
func (p *Price) effective(prompt int64) [stats.NumTokenKinds]float64 {
	e, known := p.Rates.PerToken, p.Rates.Known
	for i := len(p.Tiers) - 1; i >= 0; i-- {
		t := &p.Tiers[i]
		if prompt <= t.Above {
			continue
		}
		for _, k := range tieredKinds {
			if t.Rates.Known&(1<<k) != 0 {
				e[k], known = t.Rates.PerToken[k], known|1<<k
			}
		}
		break
	}
	for k := range e {
		if w, ok := whole(stats.TokenKind(k)); ok && known&(1<<k) == 0 {
			e[k] = e[w] // a whole is no part: its price is final
		}
	}
	return e
}

// Cost returns what tokens u cost at p's prices, as the package doc says:
// Known, Charged and Uncached, each at most stats.MaxCost. A kind u does
// not report, or reports below zero, counts no tokens. Prices set by hand
// above MaxPrice, below zero or NaN cost what the sum gives, within 0 and
// stats.MaxCost.
func (p Price) Cost(u stats.TokenUsage) stats.Cost { return p.cost(&u) }

func (p *Price) cost(u *stats.TokenUsage) stats.Cost {
	var n [stats.NumTokenKinds]int64
	for k, v := range u.Tokens {
		if u.Known&(1<<k) != 0 && v > 0 {
			n[k] = v
		}
	}
	read, write := n[stats.TokenCacheRead], n[stats.TokenCacheWrite]
	r := p.effective(addSat(addSat(n[stats.TokenInput], read), write))
	// split prices the parts out of their whole, each at most what is left
	// of it, and the rest at the whole's price.
	split := func(w stats.TokenKind, parts ...stats.TokenKind) float64 {
		rest, sum := n[w], 0.0
		for _, k := range parts {
			m := min(n[k], rest)
			rest -= m
			sum += float64(m) * r[k]
		}
		return sum + float64(rest)*r[w]
	}
	common := split(stats.TokenInput, stats.TokenInputAudio, stats.TokenInputImage) +
		split(stats.TokenOutput, stats.TokenReasoning, stats.TokenOutputAudio, stats.TokenOutputImage)
	in := r[stats.TokenInput]
	return stats.Cost{
		Known:    true,
		Charged:  bounded(common + float64(read)*r[stats.TokenCacheRead] + float64(write)*r[stats.TokenCacheWrite]),
		Uncached: bounded(common + float64(read)*in + float64(write)*in),
	}
}

// bounded returns v at most stats.MaxCost, and 0 for a v below 0 or NaN,
// which only prices set by hand outside a Table can give.
func bounded(v float64) float64 {
	if !(v >= 0) {
		return 0
	}
	return min(v, stats.MaxCost)
}

// addSat returns a+b for counts that are not negative, at most
// math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
