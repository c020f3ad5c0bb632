package openaihttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
)

// A key's value is HMAC-SHA256(salt, key)'s first 12 hex digits, whether
// computed or kept from an earlier request, before and after the kept
// values outgrow maxKeyValues; they never hold more.
func TestHasherKeepsValues(t *testing.T) {
	salt := []byte("salt")
	h := newHasher(salt)
	want := func(key string) string {
		m := hmac.New(sha256.New, salt)
		m.Write([]byte(key))
		return hex.EncodeToString(m.Sum(nil))[:APIKeyHashLen]
	}
	for round := range 2 {
		for i := range maxKeyValues + 100 {
			key := fmt.Sprintf("sk-%d", i)
			if got := h.hash(key); got != want(key) {
				t.Fatalf("round %d: hash(%s) = %s, want %s", round, key, got, want(key))
			}
			if len(h.seen) > maxKeyValues {
				t.Fatalf("%d values kept, want at most %d", len(h.seen), maxKeyValues)
			}
		}
	}
	if h.hash("") != "" {
		t.Error("no key has a value")
	}
	// Many requests at once (run with -race).
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range maxKeyValues / 2 {
				key := fmt.Sprintf("sk-%d-%d", g%2, i)
				if got := h.hash(key); got != want(key) {
					t.Errorf("hash(%s) = %s, want %s", key, got, want(key))
					return
				}
			}
		})
	}
	wg.Wait()
}
