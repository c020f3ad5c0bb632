package openaihttp_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// operations are the endpoints and the gen_ai.operation.name each gives.
var operations = []struct{ path, op string }{
	{"/v1/chat/completions", "chat"},
	{"/v1/completions", "text_completion"},
}

// genAILabels are the GenAI attributes of an operation.
func genAILabels(op string, extra ...string) []string {
	return append([]string{"gen_ai.operation.name", op, "gen_ai.provider.name", "self_hosted",
		"gen_ai.request.model", model}, extra...)
}

func TestHandlerOperation(t *testing.T) {
	for _, tc := range operations {
		t.Run(tc.op, func(t *testing.T) {
			c := newRec(t, instrument.WithGenAISemconv())
			s := serve(t, c, sseHandler(chunk("a"), chunk("b"), chunk("c"), finishChunk("stop"), usageChunk(20, 3, 0), done))
			readAll(t, post(t, s.URL+tc.path, streamBody))
			s.wait()
			for _, family := range []string{instrument.NameGenAIServerRequestDuration,
				instrument.NameGenAIServerTimeToFirstToken, instrument.NameGenAIServerTimePerOutputToken} {
				if n := c.clientHist(family, genAILabels(tc.op, "gen_ai.response.model", model)...); n != 1 {
					t.Errorf("%s{gen_ai.operation.name=%q} count %d, want 1", family, tc.op, n)
				}
			}
		})
	}
}

func TestTransportOperation(t *testing.T) {
	for _, tc := range operations {
		t.Run(tc.op, func(t *testing.T) {
			c := newRec(t)
			up := httptest.NewServer(sseHandler(chunk("a"), chunk("b"), chunk("c"), finishChunk("stop"), usageChunk(30, 3, 0), done))
			defer up.Close()
			resp, err := client(t, c, openaihttp.WithBackend("b", "")).
				Post(up.URL+tc.path, "application/json", strings.NewReader(streamBody))
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			l := genAILabels(tc.op, "backend", "b", "backend.role", "", "model_name", model, "engine", "0")
			for family, want := range map[string]uint64{
				instrument.NameGenAIClientOperationDuration:  1,
				instrument.NameGenAIClientTimeToFirstChunk:   1,
				instrument.NameGenAIClientTimePerOutputChunk: 2,
			} {
				labels := named(l)
				if family == instrument.NameGenAIClientTimePerOutputChunk {
					labels = l // recorded as the chunks come: no response model
				}
				if n := c.clientHist(family, labels...); n != want {
					t.Errorf("%s{gen_ai.operation.name=%q} count %d, want %d", family, tc.op, n, want)
				}
			}
			if n := c.clientHist(instrument.NameGenAIClientTokenUsage, append(named(l), "gen_ai.token.type", "output")...); n != 1 {
				t.Errorf("token usage{gen_ai.operation.name=%q} count %d, want 1", tc.op, n)
			}
		})
	}
}
