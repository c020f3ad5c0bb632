package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
)

// Error types of the proxy's own 502 answers: the upstream could not be
// connected to (refused, no such host, no route), or it failed once
// connected (closed the connection, a TLS error, -response-header-timeout).
const (
	errUpstreamUnreachable = "upstream_unreachable"
	errUpstreamFailed      = "upstream_error"
)

// upstreamErrorBody is the body of the 502 answered for a request its
// upstream failed to answer, in the shape OpenAI's API and vLLM give an
// error, which OpenAI's clients read ({"error": {"message": ..., "type":
// ...}}): the message names the proxy, the upstream and the cause,
// redacted as the proxy's errors are (redact).
func upstreamErrorBody(u upstream, err error) []byte {
	kind, what := errUpstreamFailed, "failed to answer"
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" && op.Err != nil {
		kind, what, err = errUpstreamUnreachable, "unreachable", op.Err
	}
	type apiError struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{apiError{Message: redact(fmt.Sprintf("infermetrics-proxy: upstream %s %s: %v", u.url.Redacted(), what, err)), Type: kind}})
	return append(b, '\n')
}

// writeUpstreamError answers 502 with upstreamErrorBody.
func writeUpstreamError(w http.ResponseWriter, u upstream, err error) {
	body := upstreamErrorBody(u, err)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusBadGateway)
	_, _ = w.Write(body)
}
