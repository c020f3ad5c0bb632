package stats

// PriorityBucket is the value of the priority label that finished-request
// families carry under priority scheduling. vLLM (PR #58078's branch @04dc4606,
// not yet merged when read) buckets the raw priority so that the label has
// five values however many priorities clients send: below -1, -1, 0, 1,
// above 1 (lower values are more urgent).
type PriorityBucket uint8

const (
	// PriorityBelowMinusOne: a priority below -1 (label "<-1").
	PriorityBelowMinusOne PriorityBucket = iota
	// PriorityMinusOne: priority -1, conventionally high (label "-1").
	PriorityMinusOne
	// PriorityZero: priority 0, the default (label "0").
	PriorityZero
	// PriorityOne: priority 1, conventionally low (label "1").
	PriorityOne
	// PriorityAboveOne: a priority above 1 (label ">1").
	PriorityAboveOne

	// NumPriorityBuckets is the number of PriorityBucket values.
	NumPriorityBuckets = iota
)

var priorityBucketLabels = [NumPriorityBuckets]string{"<-1", "-1", "0", "1", ">1"}

// PriorityBuckets returns every PriorityBucket in label order.
func PriorityBuckets() []PriorityBucket {
	return []PriorityBucket{PriorityBelowMinusOne, PriorityMinusOne, PriorityZero, PriorityOne, PriorityAboveOne}
}

// BucketPriority returns the bucket of a request priority: the one mapping of
// a priority to its label value (vLLM's bucket_priority).
func BucketPriority(p int) PriorityBucket {
	switch {
	case p < -1:
		return PriorityBelowMinusOne
	case p > 1:
		return PriorityAboveOne
	}
	return PriorityBucket(p + 2) // -1, 0, 1
}

// String returns the priority label value: "<-1", "-1", "0", "1" or ">1".
func (b PriorityBucket) String() string {
	if int(b) < NumPriorityBuckets {
		return priorityBucketLabels[b]
	}
	return "unknown"
}
