// Command promhttp serves client_golang's promhttp alone: the baseline of
// the dependency cost (docs/install.md).
package main

import (
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	http.Handle("/metrics", promhttp.Handler())
	log.Fatal(http.ListenAndServe("localhost:8000", nil))
}
