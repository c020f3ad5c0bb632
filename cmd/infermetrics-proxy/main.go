// Command infermetrics-proxy is a reverse proxy that gives any
// OpenAI-compatible inference server vLLM's metrics, with no code: put it in
// front of Ollama, llama.cpp's server, vLLM or SGLang and scrape it.
//
// Every request and response passes through unchanged, on every path.
// POSTs to the APIs package openaihttp reads (chat and text completions,
// Responses, Anthropic Messages, embeddings and pooling, Ollama's
// /api/chat and /api/generate), under any provider's base path, and to the
// -route patterns, are recorded by it (its handler around the proxy, its
// transport under it) with vLLM's families and the
// OpenTelemetry GenAI conventions, per model named in each request (at most
// -max-models; the rest, and names that are not UTF-8, as
// model_name="_overflow"); every request, on every
// path, is counted in the HTTP families of vLLM's API server
// (http_requests_total and the like) under its route's pattern, none for a
// path no route matches. All go through exporters.Setup:
// Prometheus /metrics and /health on -metrics-listen, OTLP from the
// standard OTEL_* variables.
//
// Run infermetrics-proxy -h for the flags; each has an environment variable
// INFERMETRICS_PROXY_<NAME>, which a flag on the command line overrides.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], envLookup, os.Stdout, os.Stderr, nil))
}

// run parses the configuration, serves until ctx is done, drains and
// flushes; it returns the exit code: 0 after a clean shutdown, 2 for a bad
// configuration, 1 for a failure. ready, when not nil, receives the
// listening addresses once both servers accept connections.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ready chan<- addrs) int {
	c, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "infermetrics-proxy:", err)
		return 2
	}
	log := c.logger(stdout)
	if err := serve(ctx, c, log, ready); err != nil {
		log.Error("infermetrics-proxy stopped", "error", err)
		return 1
	}
	return 0
}

// level parses -log-level.
func (c *config) level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.logLevel)); err != nil {
		return 0, fmt.Errorf("%s: want debug, info, warn or error", c.setting("log-level", strconv.Quote(c.logLevel)))
	}
	return l, nil
}

// logger returns the structured logger of -log-format and -log-level.
func (c *config) logger(w io.Writer) *slog.Logger {
	l, _ := c.level() // checked by parseConfig
	opts := &slog.HandlerOptions{Level: l}
	if c.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
