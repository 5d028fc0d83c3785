package runtime

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"testing"
)

// fill sets every field of *v to random bits.
func fill(r *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(r, v.Field(i))
		}
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fill(r, v.Index(i))
		}
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(r.Uint64())
	case reflect.Int64:
		v.SetInt(int64(r.Uint64()))
	}
}

// TestPutMatchesLayout checks every Put method against encoding/binary's
// encoding of the same value: the mirrors have no implicit padding, so
// binary's field-after-field layout is the C layout that abi_test.go
// pins, and a Put that skipped or misplaced a field differs from it.
func TestPutMatchesLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		v    any
		size int
		put  func(any, []byte)
	}{
		{&Module{}, ModuleStructSize, func(v any, b []byte) { v.(*Module).Put(b) }},
		{&Probe{}, ProbeStructSize, func(v any, b []byte) { v.(*Probe).Put(b) }},
		{&Patch{}, PatchStructSize, func(v any, b []byte) { v.(*Patch).Put(b) }},
		{&Chunk{}, ChunkStructSize, func(v any, b []byte) { v.(*Chunk).Put(b) }},
		{&Stub{}, StubStructSize, func(v any, b []byte) { v.(*Stub).Put(b) }},
		{&StubFile{}, StubFileStructSize, func(v any, b []byte) { v.(*StubFile).Put(b) }},
		{&Read{}, ReadStructSize, func(v any, b []byte) { v.(*Read).Put(b) }},
	} {
		for k := 0; k < 20; k++ {
			fill(r, reflect.ValueOf(tc.v).Elem())
			want, err := binary.Append(nil, binary.LittleEndian, tc.v)
			if err != nil || len(want) != tc.size {
				t.Fatalf("%T: binary encodes %d bytes (%v), want %d", tc.v, len(want), err, tc.size)
			}
			have := make([]byte, tc.size)
			tc.put(tc.v, have)
			if !bytes.Equal(have, want) {
				t.Fatalf("%T.Put:\nhave % x\nwant % x", tc.v, have, want)
			}
		}
	}
}
