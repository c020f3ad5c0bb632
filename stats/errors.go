package stats

import (
	"errors"
	"fmt"
	"math"
)

// Sentinel errors; every error returned by this package matches one of them
// with errors.Is.
var (
	// ErrNegative reports a count or duration below zero.
	ErrNegative = errors.New("must not be negative")
	// ErrNotFinite reports a NaN or infinite duration or ratio.
	ErrNotFinite = errors.New("must be a finite number")
	// ErrOutOfRange reports a value outside its allowed range (for example a
	// KV cache usage above 1).
	ErrOutOfRange = errors.New("out of range")
	// ErrOverflow reports a sum that does not fit in an int64.
	ErrOverflow = errors.New("overflows int64")
	// ErrCachedExceedsPrompt reports more cached tokens than the prompt has.
	ErrCachedExceedsPrompt = errors.New("cached tokens exceed the prompt length")
	// ErrUnknownSource reports a Source that is not one of Sources().
	ErrUnknownSource = errors.New("unknown token source")
	// ErrUnknownFinishReason reports a FinishReason that is not one of FinishReasons().
	ErrUnknownFinishReason = errors.New("unknown finish reason")
	// ErrUnknownSleepState reports a SleepState that is not one of SleepStates().
	ErrUnknownSleepState = errors.New("unknown sleep state")
	// ErrInvalidLabel reports a string that cannot be a metric label value or
	// name: empty where one is required, or not valid UTF-8.
	ErrInvalidLabel = errors.New("invalid label")
	// ErrOutOfOrder reports a timeline event earlier than the one before it,
	// or an event that its request's state does not allow.
	ErrOutOfOrder = errors.New("event out of order")
	// ErrFinished reports a timeline event after the request finished.
	ErrFinished = errors.New("request already finished")
	// ErrUnknownTier reports a Tier that is not one of Tiers().
	ErrUnknownTier = errors.New("unknown cache tier")
	// ErrTiersExceedExternal reports external tiers (host, p2p, disk) that
	// attribute more tokens than were received through the KV connector.
	ErrTiersExceedExternal = errors.New("tiers exceed the external KV tokens they split")
)

// FieldError is the error for one bad field: it names the field and the value
// and wraps the sentinel that says what is wrong.
type FieldError struct {
	Field string
	Value any
	Err   error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("stats: %s = %v: %v", e.Field, e.Value, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field string, value any, err error) error {
	return &FieldError{Field: field, Value: value, Err: err}
}

// prefixed returns err with field names qualified by prefix, so that a
// nested value's error names its full path (for example "Finished[2].E2ELatency").
func prefixed(prefix string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: prefix + "." + fe.Field, Value: fe.Value, Err: fe.Err}
	}
	return err
}

func checkCount(field string, v int64) error {
	if v < 0 {
		return fieldErr(field, v, ErrNegative)
	}
	return nil
}

func checkSeconds(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fieldErr(field, v, ErrNotFinite)
	}
	if v < 0 {
		return fieldErr(field, v, ErrNegative)
	}
	return nil
}

func checkCounts(field string, vs []int64) error {
	for i, v := range vs {
		if v < 0 {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), v, ErrNegative)
		}
	}
	return nil
}

func checkSecondsList(field string, vs []float64) error {
	for i, v := range vs {
		if err := checkSeconds(field, v); err != nil {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), v, errors.Unwrap(err))
		}
	}
	return nil
}

// addChecked returns a+b for non-negative a and b, or ErrOverflow.
func addChecked(field string, a, b int64) (int64, error) {
	s := a + b
	if s < a {
		return 0, fieldErr(field, b, ErrOverflow)
	}
	return s, nil
}
