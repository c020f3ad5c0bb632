package prometheus

import (
	"bytes"
	"math"
	"strconv"
	"testing"
)

// pythonFloats are the outputs of prometheus_client's floatToGoString
// (utils.py), run with CPython 3 on these values.
var pythonFloats = []struct {
	f    float64
	text string
}{
	{0, "0.0"}, {1, "1.0"}, {-1, "-1.0"}, {2, "2.0"}, {5, "5.0"}, {10, "10.0"},
	{0.001, "0.001"}, {0.005, "0.005"}, {0.025, "0.025"}, {0.3, "0.3"}, {2.5, "2.5"}, {7.5, "7.5"},
	{160, "160.0"}, {2560, "2560.0"}, {7680, "7680.0"}, {1920, "1920.0"}, {999999, "999999.0"},
	{1e6, "1e+06"}, {1234567.5, "1.2345675e+06"}, {2048, "2048.0"}, {8589934592, "8.589934592e+09"},
	{1e10, "1e+010"}, {12345678901, "1.2345678901e+010"}, {1e15, "1e+015"}, {1e16, "1e+16"},
	{1.5e16, "1.5e+16"}, {1e21, "1e+21"}, {1e-4, "0.0001"}, {1e-5, "1e-05"}, {1.5e-7, "1.5e-07"},
	{-0.5, "-0.5"}, {-2, "-2.0"}, {-1e6, "-1000000.0"}, {-1.5e16, "-1.5e+16"}, {123456.7, "123456.7"},
	{0.30000000000000004, "0.30000000000000004"}, {math.Inf(1), "+Inf"}, {math.Inf(-1), "-Inf"},
	{5e-324, "5e-324"}, {math.MaxFloat64, "1.7976931348623157e+308"},
}

func TestPythonFloat(t *testing.T) {
	for _, tc := range pythonFloats {
		if got := string(appendPythonFloat(nil, tc.f)); got != tc.text {
			t.Errorf("appendPythonFloat(%v) = %q, want %q", tc.f, got, tc.text)
		}
		// From client_golang's text of the value (writeFloat: 'g', -1).
		goText := strconv.FormatFloat(tc.f, 'g', -1, 64)
		if math.IsInf(tc.f, 1) {
			goText = "+Inf"
		}
		if got := string(pythonBound([]byte("x"), []byte(goText))); got != "x"+tc.text {
			t.Errorf("pythonBound(%q) = %q, want %q", goText, got[1:], tc.text)
		}
	}
	if got := string(appendPythonFloat(nil, math.NaN())); got != "NaN" {
		t.Errorf("NaN: %q", got)
	}
}

func TestWritePythonBuckets(t *testing.T) {
	in := `# HELP h A help with ,le="1" in it.
# TYPE h histogram
h_bucket{file="2",le="1"} 0
h_bucket{a="x,le=\"5\"",le="0.005"} 1
h_bucket{le="2560"} 2
h_bucket{le="8.589934592e+09"} 2
h_bucket{le="1e+10"} 2
h_bucket{le="+Inf"} 3
h_sum 1
h_count 3
`
	want := `# HELP h A help with ,le="1" in it.
# TYPE h histogram
h_bucket{file="2",le="1.0"} 0
h_bucket{a="x,le=\"5\"",le="0.005"} 1
h_bucket{le="2560.0"} 2
h_bucket{le="8.589934592e+09"} 2
h_bucket{le="1e+010"} 2
h_bucket{le="+Inf"} 3
h_sum 1
h_count 3
`
	var out bytes.Buffer
	if _, err := writePythonBuckets(&out, []byte(in), nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}
