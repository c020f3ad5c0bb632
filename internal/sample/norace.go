//go:build !race

package sample

const race = false
