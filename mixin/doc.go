// Package mixin generates the Prometheus rules, alerts and Grafana
// dashboards of the families infermetrics exports, and their runbook
// (docs/monitoring.md), from one source: family names come from package
// views, never retyped. Config holds the thresholds and selectors, Default
// the shipped ones, Files every generated file.
//
// It is a module of its own, so that the library's go.mod does not carry
// Grafana's SDK. Regenerate the committed files with
//
//	go generate ./...
package mixin

//go:generate go run ./cmd/generate
