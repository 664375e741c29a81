package lease

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// FuzzRecordDecode feeds arbitrary bytes to the record decoder (as a
// corrupt or foreign page store would): it must never panic, and anything
// it accepts must survive a re-encode unchanged.
func FuzzRecordDecode(f *testing.F) {
	for _, g := range []string{"08cdd7d29101103c", "08071080b4c4c321182a", "08fbffffffffffffffff011001", "0801", ""} {
		b, _ := hex.DecodeString(g)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := unmarshal(b)
		if err != nil {
			return
		}
		enc := r.marshal()
		r2, err := unmarshal(enc)
		if err != nil || r2 != r {
			t.Fatalf("%x decoded to %+v, re-encoded as %x, decoded again to %+v, %v", b, r, enc, r2, err)
		}
		if !bytes.Equal(r2.marshal(), enc) {
			t.Fatalf("encoding of %+v is not stable", r)
		}
	})
}
