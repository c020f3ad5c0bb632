package stats

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// MaxSeconds bounds every duration this package accepts (about 31.7 years).
// Histograms add durations into float64 sums that never reset: with values of
// at most 1e9 s, no realistic number of observations can take a sum to +Inf,
// where one absurd but finite value (1e308) would leave it forever.
const MaxSeconds = 1e9

// Sentinel errors; every error returned by this package matches one of them
// with errors.Is.
var (
	// ErrNegative reports a count or duration below zero.
	ErrNegative = errors.New("must not be negative")
	// ErrNotFinite reports a NaN or infinite duration or ratio.
	ErrNotFinite = errors.New("must be a finite number")
	// ErrOutOfRange reports a value outside its allowed range (for example a
	// KV cache usage above 1, or a duration above MaxSeconds).
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
	// ErrUnknownOperation reports an Operation that is not one of Operations().
	ErrUnknownOperation = errors.New("unknown GenAI operation")
	// ErrUnknownErrorType reports an ErrorType that is not one of ErrorTypes() nor ErrorNone.
	ErrUnknownErrorType = errors.New("unknown error type")
	// ErrDetailExceedsTotal reports a part of a request's tokens (reasoning,
	// audio, image, cache writes) larger than the whole it is a part of.
	ErrDetailExceedsTotal = errors.New("token detail exceeds the tokens it is a part of")
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
	// Hint says what the value must be or which call fixes it: the allowed
	// range ("want 1 or more"), the field it is compared with ("more than
	// Queries (1)"). Empty when the sentinel says it all.
	Hint string
}

// Error reads "stats: Field = Value: sentinel[: hint]".
func (e *FieldError) Error() string {
	if e.Hint != "" {
		return fmt.Sprintf("stats: %s = %v: %v: %s", e.Field, e.Value, e.Err, e.Hint)
	}
	return fmt.Sprintf("stats: %s = %v: %v", e.Field, e.Value, e.Err)
}

// Unwrap returns the sentinel, for errors.Is.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field string, value any, err error) error {
	return &FieldError{Field: field, Value: value, Err: err}
}

// hintedErr is fieldErr with a hint (see FieldError.Hint).
func hintedErr(field string, value any, err error, hint string) error {
	return &FieldError{Field: field, Value: value, Err: err, Hint: hint}
}

// prefixed returns err with field names qualified by prefix, so that a
// nested value's error names its full path (for example "Finished[2].E2ELatency").
func prefixed(prefix string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: prefix + "." + fe.Field, Value: fe.Value, Err: fe.Err, Hint: fe.Hint}
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
	if v > MaxSeconds {
		return hintedErr(field, v, ErrOutOfRange, "want at most MaxSeconds (1e9)")
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
			fe := err.(*FieldError)
			return hintedErr(fmt.Sprintf("%s[%d]", field, i), v, fe.Err, fe.Hint)
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

// EventError is the error for a Timeline event the request's state does not
// allow. It names the event and the previous one with their absolute times,
// so that a log line shows which clock reading is wrong, and wraps
// ErrOutOfOrder (the event is earlier than the previous one, or cannot
// follow it), ErrFinished (the request has finished) or ErrOutOfRange (the
// event is more than MaxSeconds after the arrival; Previous is then
// "Arrival").
type EventError struct {
	Event      string // "Queued", "Scheduled", "Output", "Preempted" or "Finish"
	At         time.Time
	Previous   string // the previous event, or "Arrival"
	PreviousAt time.Time
	Err        error
	// Hint says which call or time fixes the event ("call Scheduled
	// first"); empty when the sentinel says it all.
	Hint string
}

// Error reads "stats: Event at T <problem> (Previous at T0): sentinel[: hint]".
func (e *EventError) Error() string {
	problem := "cannot follow the previous event"
	switch {
	case errors.Is(e.Err, ErrFinished):
		problem = "comes after the request finished"
	case errors.Is(e.Err, ErrOutOfRange):
		problem = "is more than MaxSeconds after the arrival"
	case e.At.Before(e.PreviousAt):
		problem = "is before the previous event"
	}
	msg := fmt.Sprintf("stats: %s at %s %s (%s at %s): %v",
		e.Event, formatTime(e.At), problem, e.Previous, formatTime(e.PreviousAt), e.Err)
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	return msg
}

// Unwrap returns the sentinel, for errors.Is.
func (e *EventError) Unwrap() error { return e.Err }

// formatTime writes t in UTC as RFC 3339 with milliseconds, or with micro-
// or nanoseconds when they are not zero (two events 0.1 ms apart must not
// print the same time).
func formatTime(t time.Time) string {
	s := t.UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
	// Trim the fraction's trailing zeros three digits at a time, keeping three.
	frac := strings.IndexByte(s, '.') + 1
	end := strings.IndexByte(s[frac:], 'Z') + frac
	digits := s[frac:end]
	for len(digits) > 3 && strings.HasSuffix(digits, "000") {
		digits = digits[:len(digits)-3]
	}
	return s[:frac] + digits + s[end:]
}
