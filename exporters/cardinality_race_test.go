//go:build race

package exporters

// underRace is true when the tests run with the race detector, which makes
// recording about ten times slower: the longest loops run fewer rounds.
const underRace = true
