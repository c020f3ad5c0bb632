module github.com/infermetrics/infermetrics/e2e

go 1.26.0
