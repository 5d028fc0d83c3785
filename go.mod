module github.com/stint-project/stint

go 1.26.8

require (
	github.com/apache/arrow/go/v15 v15.0.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	golang.org/x/arch v0.32.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
