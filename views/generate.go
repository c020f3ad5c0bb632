package views

//go:generate go run ./internal/gendoc -o ../docs/metrics.md
