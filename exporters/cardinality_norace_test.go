//go:build !race

package exporters

// underRace is true when the tests run with the race detector.
const underRace = false
