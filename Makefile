# Conveniences over scripts/ (the README's commands need no make).

GO ?= go

.PHONY: build test test-short demo bench generate clean

build:
	@mkdir -p bin
	$(GO) build -tags duckdb_arrow -o bin/ ./cmd/...

test:
	./scripts/test.sh

test-short:
	$(GO) test -short -count=1 ./...

demo:
	./scripts/demo.sh

bench: build
	$(GO) run ./benchmarks/cmd/bench

generate:
	$(GO) generate ./...

clean:
	rm -rf bin traces
