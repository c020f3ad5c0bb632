// Package sample chooses what a long replay test runs under the race
// detector: the whole set in a build without it, a fixed part of it in a
// build with it (go test -race), so that the race-enabled unit tests stay
// fast while a run without -race (scripts/test.sh runs one) replays
// everything. It is test support: no program uses it.
//
// The part is chosen by a fixed rule, never by a random draw: the first
// item of each kind the test names (a provider, API, framing and encoding,
// say), and every Every-th item, so that each run replays what the one
// before replayed and a failure replays alike.
package sample

// Race reports a build with the race detector.
const Race = race

// Every is the step of Of: every Every-th item is kept besides the first
// of each kind.
const Every = 8

// UnderRace returns items whole in a build without the race detector, and
// Of(items, kind) in one with it.
func UnderRace[T any](items []T, kind func(*T) string) []T {
	if !Race {
		return items
	}
	return Of(items, kind)
}

// Of returns, in their order, the first item of each kind (kind(item))
// and every Every-th item.
func Of[T any](items []T, kind func(*T) string) []T {
	var out []T
	seen := map[string]bool{}
	for i := range items {
		k := kind(&items[i])
		if !seen[k] || i%Every == 0 {
			out = append(out, items[i])
		}
		seen[k] = true
	}
	return out
}
