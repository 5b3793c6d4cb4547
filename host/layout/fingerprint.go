package layout

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/zeebo/xxh3"
)

// Fingerprint identifies a layout wherever its bytes leave the process.
// Two layouts have the same fingerprint exactly when their canonical
// descriptors are equal; a changed field gives a different one.
type Fingerprint uint64

// String is 16 lowercase hex digits, the form used in file and object names.
func (f Fingerprint) String() string { return fmt.Sprintf("%016x", uint64(f)) }

// ParseFingerprint reads the String form.
func ParseFingerprint(s string) (Fingerprint, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("%w: fingerprint %q is not 16 hex digits", ErrInvalid, s)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: fingerprint %q: %v", ErrInvalid, s, err)
	}
	return Fingerprint(v), nil
}

// canonicalVersion is bumped if the encoding below ever changes; doing so
// changes every fingerprint, which is the point: old pages must not be
// read under a new interpretation.
const canonicalVersion = "kvpilot-layout-v1"

// Canonical is the byte encoding the fingerprint hashes: fixed-width little
// endian integers and length-prefixed strings, in field order, so that it
// never depends on map order, JSON spacing or Go struct layout.
func (l *Layout) Canonical() []byte {
	b := make([]byte, 0, 96+len(l.Model)+16*len(l.Buffers))
	str := func(s string) {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	u32 := func(v int) { b = binary.LittleEndian.AppendUint32(b, uint32(v)) }
	str(canonicalVersion)
	str(l.Model)
	u32(l.PageSize)
	b = append(b, byte(l.DType))
	u32(l.Layers)
	u32(len(l.Buffers))
	for _, buf := range l.Buffers {
		str(buf.Name)
		u32(buf.Heads)
		u32(buf.HeadDim)
	}
	if r := l.Rope; r != nil {
		b = append(b, 1)
		u32(r.Buffer)
		u32(r.Offset)
		u32(r.Dim)
		b = append(b, byte(r.Style))
	} else {
		b = append(b, 0)
	}
	return b
}

// Fingerprint hashes the canonical descriptor with xxh3-64.
func (l *Layout) Fingerprint() Fingerprint { return Fingerprint(xxh3.Hash(l.Canonical())) }
