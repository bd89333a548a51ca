# latch: make run (a single-mode server on loopback), make test (the whole suite).
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
BIN       := bin/latch
FUZZTIME  ?= 30s

BENCH_PORT   ?= 17400
BENCH_POINTS ?= 1:1 16:16 64:64 16:1
BENCH_ARGS   ?= --duration 5s --warmup 1s

CLUSTER_DIR ?= /tmp/latch-cluster

IMAGE     ?= ghcr.io/latchd/latch

.PHONY: build run cluster test test-short test-deploy test-fence image bench microbench fuzz lint clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/latch

## run: a single-mode server on 127.0.0.1:7400 (protocol) and 127.0.0.1:7402 (health, metrics).
run: build
	./$(BIN) server --listen 127.0.0.1:7400 --http 127.0.0.1:7402

## cluster: a three-node cluster on loopback (clients on 127.0.0.1:7410-7412, peers on
## 7420-7422, HTTP on 7430-7432), data in CLUSTER_DIR; Ctrl-C stops all three by PID.
cluster: build
	@mkdir -p $(CLUSTER_DIR); ic="n1=127.0.0.1:7420,n2=127.0.0.1:7421,n3=127.0.0.1:7422"; pids=""; \
	trap 'kill $$pids 2>/dev/null; wait $$pids 2>/dev/null' EXIT INT TERM; \
	for i in 0 1 2; do \
		./$(BIN) server --mode cluster --id n$$((i+1)) --data-dir $(CLUSTER_DIR)/n$$((i+1)) \
			--listen 127.0.0.1:741$$i --raft-addr 127.0.0.1:742$$i --http 127.0.0.1:743$$i \
			--initial-cluster $$ic 2>>$(CLUSTER_DIR)/n$$((i+1)).log & pids="$$pids $$!"; \
	done; \
	echo "three nodes up (logs in $(CLUSTER_DIR)); try:"; \
	echo "  $(BIN) status --http 127.0.0.1:7430"; \
	echo "  $(BIN) acquire --servers 127.0.0.1:7410,127.0.0.1:7411,127.0.0.1:7412 --lease 30s demo"; \
	echo "Ctrl-C stops them"; wait

## test: every package with the race detector; cluster and process tests start their own servers;
## then the fence module (test-fence).
test:
	$(GO) test -race -count=1 -timeout 15m ./...
	$(MAKE) --no-print-directory test-fence

## test-fence: client/fence/fencetest (its own go.mod, so the database drivers stay out of latch's
## module): package fence on SQLite (pure Go) and on a PostgreSQL server the tests start from
## /usr/lib/postgresql/*/bin (skipped without it, a failure under CI=true; MySQL likewise on
## MariaDB where mariadb-server is installed), and two `latch run` holders of one key racing
## with the first paused past its lease, on SQLite and PostgreSQL.
test-fence:
	cd client/fence/fencetest && $(GO) test -race -count=1 -timeout 10m ./...

## test-deploy: the deploy module (its own go.mod, so Kubernetes libraries stay out of latch):
## renders deploy/k8s with kustomize, decodes every object strictly into the API types, and
## runs the StatefulSet's pod args as real processes on 127.0.0.19-24 (ports 7400-7402).
test-deploy:
	cd deploy && $(GO) vet ./... && $$($(GO) -C .. tool -n staticcheck) ./... && $(GO) test -count=1 -timeout 10m ./...

## image: the container image (deploy/container/Dockerfile), where Docker is present.
image:
	@command -v docker >/dev/null || { echo "make image needs docker"; exit 1; }
	docker build -f deploy/container/Dockerfile --build-arg VERSION=$(VERSION) \
		--build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
		--build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) -t $(IMAGE):$(VERSION) .

test-short:
	$(GO) test -short -count=1 ./...

## bench: latch bench (the client library) against a single-mode server started here, at each
## clients:keys point of BENCH_POINTS; the server is stopped by its PID afterwards.
bench: build
	@./$(BIN) server --listen 127.0.0.1:$(BENCH_PORT) --http 127.0.0.1:$$(($(BENCH_PORT)+2)) --log-level warn & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; wait $$pid 2>/dev/null' EXIT; \
	for i in $$(seq 50); do ./$(BIN) ping --servers 127.0.0.1:$(BENCH_PORT) >/dev/null 2>&1 && break; sleep 0.1; done; \
	for p in $(BENCH_POINTS); do \
		echo "== clients $${p%%:*} keys $${p##*:}"; \
		./$(BIN) bench --servers 127.0.0.1:$(BENCH_PORT) --clients $${p%%:*} --keys $${p##*:} $(BENCH_ARGS) 2>/dev/null || exit 1; \
	done

## microbench: codec, table, heap, node and server benchmarks (allocations, memory per key,
## sweep stall, pipelined throughput).
microbench:
	$(GO) test -run='^$$' -bench=. -benchmem ./wire/ ./fsm/ ./expiry/ ./cluster/ ./cluster/server/

## fuzz: each decoder fuzz target for FUZZTIME.
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeRequest$$' -fuzztime=$(FUZZTIME) ./wire/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeResponse$$' -fuzztime=$(FUZZTIME) ./wire/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	cd client/fence/fencetest && $(GO) vet ./... && $$($(GO) -C ../../.. tool -n staticcheck) ./...

clean:
	rm -rf bin
