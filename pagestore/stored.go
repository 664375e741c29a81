package pagestore

import (
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// StoredValue is a value as a bucket holds it, possibly compressed, for a
// reader that sizes one buffer for many values before copying any out:
// Len is the value's length once inflated, known without inflating it,
// and Bucket.AppendValue appends it inflated. A reader that copies each
// value into a buffer sized as it goes (GetBuf) either guesses the size
// and grows it, keeping the old buffer as garbage beside the new, or
// decodes into a scratch buffer and copies again; with StoredValue a
// range's values are decoded once, straight into a buffer of their exact
// total. It points into the mapping (or the writer's node) and is valid
// until the transaction ends.
type StoredValue struct {
	v []byte
	f uint32
	n int
}

// PlainValue is a StoredValue for v as it is, for a reader that mixes
// values it holds itself (a write not yet committed) with stored ones.
func PlainValue(v []byte) StoredValue { return StoredValue{v: v, n: len(v)} }

// Len is the value's length as the application wrote it.
func (sv StoredValue) Len() int { return sv.n }

// GetStored is Get for a value to be copied out later by AppendValue:
// found is false if key has no value.
func (b *Bucket) GetStored(key []byte) (sv StoredValue, found bool, err error) {
	if err := b.usable(false); err != nil {
		return StoredValue{}, false, err
	}
	v, f, err := b.get(key)
	if err != nil || v == nil {
		return StoredValue{}, false, err
	}
	sv = StoredValue{v: v, f: f & elemFlagsCompressed}
	switch sv.f {
	case 0:
		sv.n = len(v)
		return sv, true, nil
	case elemFlagS2:
		n, lerr := s2.DecodedLen(v)
		if lerr == nil && n <= MaxValueSize {
			sv.n = n
			return sv, true, nil
		}
	case elemFlagZstd:
		var h zstd.Header
		if h.Decode(v) == nil && h.HasFCS && h.FrameContentSize <= MaxValueSize {
			sv.n = int(h.FrameContentSize)
			return sv, true, nil
		}
	}
	// A length the header does not give (a zstd frame written without
	// its content size) or a value that does not decode: inflate it now,
	// into memory of its own, which also names a corrupt value's page.
	out, _, err := b.GetBuf(key, nil)
	if err != nil {
		return StoredValue{}, false, err
	}
	return PlainValue(out), true, nil
}

// AppendValue appends the value sv, which GetStored returned for key in
// b's transaction, inflated, and returns the extended buffer: exactly
// sv.Len() bytes longer, with no allocation when dst has the room.
func (b *Bucket) AppendValue(dst, key []byte, sv StoredValue) ([]byte, error) {
	if sv.f == 0 {
		return append(dst, sv.v...), nil
	}
	at := len(dst)
	if cap(dst)-at < sv.n {
		grown := make([]byte, at, at+sv.n)
		copy(grown, dst)
		dst = grown
	}
	var err error
	switch sv.f {
	case elemFlagS2:
		var out []byte
		out, err = s2.Decode(dst[at:at+sv.n], sv.v)
		if err == nil && len(out) != sv.n {
			err = fmt.Errorf("S2 value: decoded %d bytes, its header says %d", len(out), sv.n)
		}
	case elemFlagZstd:
		var dec *zstd.Decoder
		if _, dec, err = zstdCodecs(); err == nil {
			var out []byte
			out, err = dec.DecodeAll(sv.v, dst[at:at:at+sv.n])
			if err == nil && len(out) != sv.n {
				err = fmt.Errorf("zstd value: decoded %d bytes, its frame says %d", len(out), sv.n)
			}
		}
	default:
		err = fmt.Errorf("value flags %#x name two codecs", sv.f)
	}
	if err != nil {
		return dst[:at], b.appendError(string(key), sv, err)
	}
	return dst[:at+sv.n], nil
}

// appendError is AppendValue's error for a value of key that did not
// decode, named by its page and offset (Bucket.inflated). The key comes
// as a copy, so that AppendValue's key does not escape to the heap: a
// range appends a value for each of its keys.
func (b *Bucket) appendError(key string, sv StoredValue, err error) error {
	if _, err = b.inflated(key, sv.f, sv.v, err); err == nil {
		// The lookup found the value well formed this time, which a
		// committed page's bytes cannot be: the writer changed it.
		err = fmt.Errorf("pagestore: bucket %q: key %x: the value changed while it was read", b.name, key)
	}
	return err
}
