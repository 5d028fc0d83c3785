package runtime

// The blob is rebuilt from src/ with Debian's gcc 12 (see build.sh); the
// result, blob/stint.bin and blob.go, is committed so that go build and go
// install never need a C compiler.

//go:generate sh build.sh
