package main

import "github.com/infermetrics/infermetrics/stats"

// Simulated multimodal traffic: some requests carry images, drawn from a
// small pool so that popular ones repeat, and each engine keeps the last
// images it processed in a multimodal cache (vllm:mm_cache_queries_total
// and vllm:mm_cache_hits_total).
const (
	imagePool     = 24 // distinct images the clients send
	mmCacheImages = 8  // images an engine's multimodal cache holds
)

// images draws the images of a new request: none for most, one or two for
// a share of them, the low-numbered ones more often.
func (w *workload) images() []int {
	rng := w.imageRng
	if rng.Float64() >= w.multimodal {
		return nil
	}
	imgs := make([]int, 1+rng.IntN(2))
	for i := range imgs {
		imgs[i] = rng.IntN(rng.IntN(imagePool) + 1)
	}
	return imgs
}

// mmCache is an engine's multimodal cache: an LRU of image ids, and the
// lookups of the current step.
type mmCache struct {
	order []int // least recently used first
	step  stats.CacheQueries
}

// lookupImages looks a request's images up as the engine admits it, then
// keeps them.
func (e *engine) lookupImages(j *job) {
	c := &e.mm
	for _, img := range j.images {
		c.step.Queries++
		for i, held := range c.order {
			if held == img {
				c.step.Hits++
				c.order = append(c.order[:i], c.order[i+1:]...)
				break
			}
		}
		c.order = append(c.order, img)
		if len(c.order) > mmCacheImages {
			c.order = c.order[1:]
		}
	}
}

// take returns the step's lookups and starts the next step.
func (c *mmCache) take() stats.CacheQueries {
	q := c.step
	c.step = stats.CacheQueries{}
	return q
}
