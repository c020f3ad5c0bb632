package openaihttp

import "bytes"

// One scan per byte. A handler whose response body is the body of a leg
// of its request, passed on unchanged and unencoded (a reverse proxy, a
// router relaying its decode leg), takes what the transport read of it
// instead of reading it again. The leg publishes each read: its bytes, and
// the content chunks and dropped values of the documents it completed. The
// handler links to the leg whose first read is its first write, and takes
// each write that is, byte for byte, the read not taken yet: the leg's
// facts after it (finish, usage, done, ...) and its content chunks, timed
// by the handler's own clock when it writes them. Anything else it writes
// (a read changed, split or joined, bytes of its own, another leg's) it
// reads itself, on from where the leg's scanner stood after the last read
// it took: it records exactly what reading every byte would have.

// maxFeedBytes bounds a read a leg publishes, and maxFeedEvents the
// content chunks and dropped values of one: a longer read is read again by
// the handler.
const (
	maxFeedBytes  = 16 << 10
	maxFeedEvents = 256
)

// feed states.
const (
	feedOpen   uint8 = iota
	feedBroken       // a read was not taken before the next one: the handler reads on itself from before it
	feedOff          // not published: no handler takes it, or it reads on itself
)

// feed is what a leg's observer read, published for the handler of its
// client request. A legBody's mu guards it.
type feed struct {
	state   uint8
	reads   int         // reads published
	pending bool        // the last read published is not taken yet
	buf     []byte      // its bytes
	events  []feedEvent // its content chunks and dropped values, in order
	// The scanner before the pending read, when it was not clean (snapped);
	// a clean one reads on as a new scanner does.
	snap    *scanner
	snapped bool
	// What the leg's observer was before its first read: the handler's must
	// be the same for the first to take the leg's reads.
	ep               endpoint
	streaming, sniff bool
}

// feedEvent is a content chunk, or values a document dropped.
type feedEvent struct {
	choices              uint32
	content, timed, many bool
	dropped              uint8
}

// newFeed returns the feed of a leg whose observer, o, has read nothing.
func newFeed(o *observer) feed {
	return feed{ep: o.ep, streaming: o.streaming, sniff: o.sniff}
}

// publish readies f for the read p, which o is about to observe.
func (f *feed) publish(p []byte, o *observer) {
	o.pub = nil
	if f.state != feedOpen {
		return
	}
	if !f.pending {
		f.snapped = !o.sc.clean()
		if f.snapped {
			if f.snap == nil {
				f.snap = new(scanner)
			}
			*f.snap = *o.sc
		}
	}
	if f.pending || len(p) > maxFeedBytes {
		f.pending, f.state = true, feedBroken
		return
	}
	f.buf = append(f.buf[:0], p...)
	f.events = f.events[:0]
	f.pending = true
	f.reads++
	o.pub = f
}

func (f *feed) content(timed bool, choices uint32, many bool) {
	f.add(feedEvent{content: true, timed: timed, choices: choices, many: many})
}

func (f *feed) dropped(bits uint8) { f.add(feedEvent{dropped: bits}) }

func (f *feed) add(e feedEvent) {
	if f.state != feedOpen {
		return
	}
	if len(f.events) == maxFeedEvents {
		f.state = feedBroken
		return
	}
	f.events = append(f.events, e)
}

// off stops publishing.
func (f *feed) off() {
	f.state, f.buf, f.events, f.snap = feedOff, nil, nil, nil
}

// link takes the leg's first read for o, a handler's observer that has
// read nothing, when p, o's first write, is that read and o reads a body
// as the leg's observer does; it reports whether it did.
func (b *legBody) link(p []byte, o *observer) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.feed
	if f.state != feedOpen || f.reads != 1 || !f.pending || f.ep != o.ep ||
		f.streaming != o.streaming || f.sniff != o.sniff || !bytes.Equal(p, f.buf) {
		return false
	}
	f.pending = false
	o.take(&b.obs, f.events)
	return true
}

// stopFeed stops the leg's publishing.
func (b *legBody) stopFeed() {
	b.mu.Lock()
	b.feed.off()
	b.mu.Unlock()
}

// next takes for o, linked by link, what the leg read of p when p is the
// read not yet taken. Else it gives o the scanner to read p on from
// (where the leg's stood after the last read o took), the leg stops
// publishing, and next returns false.
func (b *legBody) next(p []byte, o *observer) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.feed
	if f.state == feedOpen && f.pending && bytes.Equal(p, f.buf) {
		f.pending = false
		o.take(&b.obs, f.events)
		return true
	}
	o.sc = new(scanner)
	switch {
	case !f.pending:
		*o.sc = *b.obs.sc
	case f.snapped:
		*o.sc = *f.snap
	default:
		o.sc.reset(o.ep)
	}
	f.off()
	return false
}

// take takes in a read of leg, which o writes: leg's facts after it (o
// took every read before it), and its content chunks and dropped values,
// as o's own.
func (o *observer) take(leg *observer, events []feedEvent) {
	o.bodyFacts = leg.bodyFacts
	if o.respLen == 0 && leg.respLen > 0 {
		o.respLen = copy(o.resp[:], leg.resp[:leg.respLen])
	}
	o.timed = false
	for _, e := range events {
		if e.content {
			o.content(e.timed, e.choices, e.many)
		} else {
			o.reportDropped(e.dropped) // the leg reported it: not again
		}
	}
}
