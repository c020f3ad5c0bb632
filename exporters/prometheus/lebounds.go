package prometheus

import (
	"bytes"
	"io"
	"math"
	"strconv"

	"github.com/infermetrics/infermetrics/stats"
)

// vLLM serves /metrics through Python's prometheus_client, which writes
// bucket bounds with floatToGoString: Python's repr of the float ("1.0",
// "0.005", "2560.0"), Go's exponent form from 1e6 up ("8.589934592e+09",
// but "1e+010" from 1e10), "+Inf". client_golang writes "1", "2560". Before
// Prometheus 3 the le label is stored as written, so vLLM's own le="1.0"
// selectors match nothing against client_golang's text. The text-format
// handler rewrites the le values of histogram families to Python's text
// (see docs/design.md); OpenMetrics already writes "1.0", protobuf has no text.

// appendPythonFloat appends f as prometheus_client's floatToGoString writes it.
func appendPythonFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(dst, "+Inf"...)
	case math.IsInf(f, -1):
		return append(dst, "-Inf"...)
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	}
	start := len(dst)
	dst = stats.AppendPythonRepr(dst, f)
	exp := 0
	if e := bytes.LastIndexByte(dst[start:], 'e'); e >= 0 {
		exp, _ = strconv.Atoi(string(dst[start+e+1:]))
	}
	// "Go switches to exponents sooner than Python": a positive value with
	// more than six digits before the point gets "e+0" and the exponent.
	dot := bytes.IndexByte(dst[start:], '.')
	if f <= 0 || dot <= 6 || exp >= 16 {
		return dst
	}
	repr := dst[start:]
	mantissa := append([]byte{repr[0], '.'}, repr[1:dot]...)
	mantissa = bytes.TrimRight(append(mantissa, repr[dot+1:]...), "0.")
	dst = append(dst[:start], mantissa...)
	dst = append(dst, "e+0"...)
	return strconv.AppendInt(dst, int64(dot-1), 10)
}

// pythonBound appends the Python text of a bound that client_golang wrote
// as goText. Whole numbers, the common case, only gain ".0"; other
// positional values are the same in both; exponent forms are re-derived.
func pythonBound(dst, goText []byte) []byte {
	digits := goText
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	integer, positional := len(digits) > 0, true
	for _, c := range digits {
		if c < '0' || c > '9' {
			integer = false
			positional = positional && c == '.'
		}
	}
	switch {
	case integer: // at most 6 digits: client_golang uses exponents from 1e6
		return append(append(dst, goText...), ".0"...)
	case positional && len(digits) > 0:
		return append(dst, goText...)
	case sameExponent(goText):
		return append(dst, goText...)
	}
	f, err := strconv.ParseFloat(string(goText), 64)
	if err != nil { // "+Inf" is the same in both; keep anything unexpected
		return append(dst, goText...)
	}
	return appendPythonFloat(dst, f)
}

// sameExponent reports an exponent form that Python writes the same way:
// any negative exponent (both below 1e-4), a positive value from 1e6 to
// below 1e10, and anything from 1e16.
func sameExponent(goText []byte) bool {
	i := bytes.IndexByte(goText, 'e')
	if i < 0 || i+4 != len(goText) && i+5 != len(goText) {
		return false
	}
	sign, exp := goText[i+1], goText[i+2:]
	switch {
	case sign == '-':
		return true
	case sign != '+':
		return false
	case len(exp) == 3 || exp[0] > '1' || exp[0] == '1' && exp[1] >= '6':
		return true // 16 and up
	}
	return goText[0] != '-' && exp[0] == '0' && exp[1] >= '6'
}

// lePrefix starts the le label of a bucket line in the text format.
var lePrefix = []byte(`le="`)

// writePythonBuckets writes the text of one histogram family with its le
// values in Python's text. Label values cannot hold an unescaped '"', so
// `le="` preceded by '{' or ',' starts the le label; comment lines (HELP,
// whose text may hold anything) are copied as they are.
func writePythonBuckets(w io.Writer, text []byte, scratch []byte) ([]byte, error) {
	out := scratch[:0]
	for len(text) > 0 {
		end := bytes.IndexByte(text, '\n') + 1
		if end == 0 {
			end = len(text)
		}
		line := text[:end]
		text = text[end:]
		if line[0] == '#' {
			out = append(out, line...)
			continue
		}
		for {
			i := bytes.Index(line, lePrefix)
			if i < 0 {
				break
			}
			v := i + len(lePrefix)
			if i == 0 || (line[i-1] != '{' && line[i-1] != ',') {
				out = append(out, line[:v]...)
				line = line[v:]
				continue
			}
			n := bytes.IndexByte(line[v:], '"')
			if n < 0 {
				break
			}
			out = pythonBound(append(out, line[:v]...), line[v:v+n])
			line = line[v+n:]
		}
		out = append(out, line...)
	}
	_, err := w.Write(out)
	return out, err
}
