// Package eventtest gives the library's tests the error of one event of a
// stats.Timeline or stats.Iteration, whose methods keep refusals rather than
// return them.
package eventtest

import "github.com/infermetrics/infermetrics/stats"

// Err makes call, an event of the Timeline or Iteration whose Refused method
// is refused, and returns the error of the refusal it added, nil when it
// added none: Err(tl.Refused, func() { tl.Queued(at) }). The refusals of a
// Timeline that an Iteration event takes (a refused Request's included)
// count as added by that event.
func Err(refused func() stats.Refusals, call func()) error {
	before := refused().Total()
	call()
	if r := refused(); r.Total() > before {
		return r.Last()
	}
	return nil
}
