# latch: make run (a single-mode server on loopback), make test (the whole suite).
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
BIN       := bin/latch
FUZZTIME  ?= 30s

.PHONY: build run test test-short bench fuzz lint clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/latch

## run: a single-mode server on 127.0.0.1:7400 (protocol) and 127.0.0.1:7402 (health, metrics).
run: build
	./$(BIN) server --listen 127.0.0.1:7400 --http 127.0.0.1:7402

## test: every package with the race detector; cluster and process tests start their own servers.
test:
	$(GO) test -race -count=1 -timeout 15m ./...

test-short:
	$(GO) test -short -count=1 ./...

## bench: codec, table, heap and node benchmarks (allocations, memory per key, sweep stall).
bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./wire/ ./fsm/ ./expiry/ ./cluster/

## fuzz: each decoder fuzz target for FUZZTIME.
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeRequest$$' -fuzztime=$(FUZZTIME) ./wire/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeResponse$$' -fuzztime=$(FUZZTIME) ./wire/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

clean:
	rm -rf bin
