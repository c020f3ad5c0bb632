package main

// corruptSalt is the draw salt of a request's corruption.
const corruptSalt = 0xc0bb

// corrupted reports whether j's output is found corrupted (NaN logits) at
// this output: a share rate of the requests, picked by id, at their first
// output on the engine. The engine counts it in
// Iteration.CorruptedRequests (vllm:corrupted_requests_total) and finishes
// it with an error.
func (e *engine) corrupted(j *job, tokens int64) bool {
	return j.tl.Generated() == tokens && e.drawsCorrupted(j.id)
}

// drawsCorrupted reports whether the request of simulation id id is one of
// the share corruptRate found corrupted.
func (e *engine) drawsCorrupted(id int) bool {
	return e.corruptRate > 0 && draw(id, corruptSalt) < e.corruptRate
}
