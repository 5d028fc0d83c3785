# stint — see README.md.
#
#   make demo   set up, then rewrite gzip, trace a run, show the trace
#   make test   set up, then run the test suite (what CI runs)

GO       ?= go
BIN      := bin
# Debian packages the tests and the demo use. gcc/g++ build the fixtures and
# the runtime blob check; the real programs are rewritten and diffed.
DEB_PKGS := gcc g++ libc6-dev make gzip bzip2 libbz2-1.0 xz-utils liblzma5 \
            sqlite3 libsqlite3-0 nodejs npm valgrind git
# Commands stint ships.
CMDS     := rewrite trace

.PHONY: all deps build test test-short demo bench generate clean

all: build

# Install what is missing (apt-get only when something is). Run as root or
# with sudo available.
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

test: deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 45m ./...

test-short:
	$(GO) test -short -count=1 ./...

generate:
	$(GO) generate ./...

demo: deps build
	./scripts/demo.sh

bench: deps build
	$(GO) run ./benchmarks/cmd/bench

clean:
	rm -rf $(BIN) traces
