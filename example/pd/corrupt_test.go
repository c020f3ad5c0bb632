package main

import (
	"fmt"
	"testing"
)

// TestCorruptionShareOfAPIRequests checks the share of API requests the
// decode instance finds corrupted at the default -corrupt rate: the draw
// is by the request's X-Request-Id (or the random id the instance gives a
// request without one), so clients that number their requests get the
// rate too, whatever the pattern of their ids. The corruption draw is the
// only way an API request finishes with finish_reason "error".
func TestCorruptionShareOfAPIRequests(t *testing.T) {
	const rate, n = 0.005, 20000
	e := &engine{corruptRate: rate}
	for _, pattern := range []string{"%d", "req-%d", "client-%d", "chatcmpl-%08d"} {
		hits := 0
		for i := range n {
			if e.drawsCorrupted(requestNumber(fmt.Sprintf(pattern, i))) {
				hits++
			}
		}
		// n*rate = 100 expected; the bounds are 4 standard deviations.
		if hits < 60 || hits > 140 {
			t.Errorf("ids %q: %d of %d corrupted, want about %v", pattern, hits, n, n*rate)
		}
	}
}
