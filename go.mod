module github.com/stint-project/stint

go 1.26.8

require (
	github.com/apache/arrow/go/v15 v15.0.2
	github.com/google/flatbuffers v23.5.26+incompatible
	github.com/spf13/pflag v1.0.10
	golang.org/x/arch v0.32.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/goccy/go-json v0.10.2 // indirect
	github.com/klauspost/compress v1.16.7 // indirect
	github.com/klauspost/cpuid/v2 v2.2.5 // indirect
	github.com/pierrec/lz4/v4 v4.1.18 // indirect
	github.com/zeebo/xxh3 v1.0.2 // indirect
	golang.org/x/exp v0.0.0-20231006140011-7918f672742d // indirect
	golang.org/x/mod v0.13.0 // indirect
	golang.org/x/tools v0.14.0 // indirect
	golang.org/x/xerrors v0.0.0-20220907171357-04be3eba64a2 // indirect
)
