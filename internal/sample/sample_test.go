package sample

import (
	"slices"
	"testing"
)

// The rule keeps the first of each kind and every Every-th item, in order,
// and the same ones on every call.
func TestOf(t *testing.T) {
	items := make([]int, 3*Every+2)
	for i := range items {
		items[i] = i
	}
	// Two kinds: the even and the odd; 1 is the first odd.
	kind := func(i *int) string { return []string{"even", "odd"}[*i%2] }
	want := []int{0, 1, Every, 2 * Every, 3 * Every}
	if got := Of(items, kind); !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	if got := Of(items, func(*int) string { return "" }); len(got) != 4 {
		t.Errorf("one kind: kept %v, want every %d-th", got, Every)
	}
}

// Without the race detector every item is replayed; with it, the rule's.
func TestUnderRace(t *testing.T) {
	items := make([]int, 5*Every)
	got := UnderRace(items, func(*int) string { return "" })
	if want := len(items); !Race && len(got) != want {
		t.Errorf("without -race: %d of %d items", len(got), want)
	}
	if want := 5; Race && len(got) != want {
		t.Errorf("under -race: %d of %d items, want %d", len(got), len(items), want)
	}
}
