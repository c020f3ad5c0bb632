// Package stacktest proves package openaihttp on the common Go HTTP stacks:
// net/http's ServeMux, httputil.ReverseProxy, gin, echo and HTTP/2. It is
// its own module, so that the web frameworks it needs stay out of the
// library's go.mod; scripts/test.sh runs it.
package stacktest
