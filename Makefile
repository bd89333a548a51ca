# latch: make run (a single-mode server on loopback), make test (the whole suite).
GO        ?= go
# VERSION: the git tag (git describe; empty without tags: the binary says dev-<revision>).
# REVISION and DATE: the commit and its time, the build date of a reproducible build.
VERSION   ?= $(shell git describe --tags --dirty 2>/dev/null)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE      ?= $(shell git log -1 --format=%cI HEAD 2>/dev/null)
BUILDINFO := github.com/latchd/latch/cluster/buildinfo
LDFLAGS   := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).revision=$(REVISION) -X $(BUILDINFO).date=$(DATE)
BIN       := bin/latch
FUZZTIME  ?= 30s

BENCH_PORT   ?= 17400
BENCH_POINTS ?= 1:1 16:16 64:64 16:1
BENCH_ARGS   ?= --duration 5s --warmup 1s

LISTEN ?= 127.0.0.1:7400
HTTP   ?= 127.0.0.1:7402

CLUSTER_DIR           ?= /tmp/latch-cluster
CLUSTER_HOST          ?= 127.0.0.1
CLUSTER_PORT_BASE     ?= 7410
CLUSTER_READY_TIMEOUT ?= 30

CHAOS_DURATION ?= 4m
CHAOS_NODES    ?= 3 5
SOAK_DURATION  ?= 60m

IMAGE     ?= ghcr.io/latchd/latch

.PHONY: build run cluster test test-short test-deploy test-fence chaos soak image release bench microbench fuzz lint clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/latch

## run: a single-mode server on LISTEN (protocol) and HTTP (health, metrics).
run: build
	./$(BIN) server --listen $(LISTEN) --http $(HTTP)

## cluster: a three-node cluster on CLUSTER_HOST: clients on ports CLUSTER_PORT_BASE+0..2,
## peers on +10..12, HTTP on +20..22 (7410-7412, 7420-7422, 7430-7432 by default), data and
## logs in CLUSTER_DIR. It waits up to CLUSTER_READY_TIMEOUT seconds for every node's
## /readyz and fails (non-zero, with the node's log tail) if one does not become ready or
## exits; Ctrl-C stops all three by PID.
cluster: build
	@set -u; d=$(CLUSTER_DIR); h=$(CLUSTER_HOST); b=$(CLUSTER_PORT_BASE); mkdir -p $$d; \
	ic="n1=$$h:$$((b+10)),n2=$$h:$$((b+11)),n3=$$h:$$((b+12))"; pids=""; \
	trap 'kill $$pids 2>/dev/null; wait $$pids 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	ready() { \
		if command -v curl >/dev/null; then curl -fs -o /dev/null "http://$$1/readyz"; \
		elif command -v wget >/dev/null; then wget -q -O /dev/null "http://$$1/readyz"; \
		else ./$(BIN) status --json --http "$$1" 2>/dev/null | grep -q '"leader_id":"[^"]'; fi; \
	}; \
	for i in 0 1 2; do n=n$$((i+1)); : > $$d/$$n.log; \
		./$(BIN) server --mode cluster --id $$n --data-dir $$d/$$n \
			--listen $$h:$$((b+i)) --raft-addr $$h:$$((b+10+i)) --http $$h:$$((b+20+i)) \
			--initial-cluster $$ic 2>>$$d/$$n.log & pids="$$pids $$!"; echo $$! > $$d/$$n.pid; \
	done; \
	for i in 0 1 2; do n=n$$((i+1)); pid=$$(cat $$d/$$n.pid); tries=$$(( $(CLUSTER_READY_TIMEOUT) * 5 )); \
		until ready $$h:$$((b+20+i)); do \
			if ! kill -0 $$pid 2>/dev/null; then why="exited"; tries=0; else why="is not ready after $(CLUSTER_READY_TIMEOUT) s"; fi; \
			tries=$$((tries-1)); if [ $$tries -le 0 ]; then \
				echo "make cluster: node $$n ($$h:$$((b+20+i))) $$why; the end of $$d/$$n.log:" >&2; \
				tail -n 20 $$d/$$n.log >&2; exit 1; fi; \
			sleep 0.2; \
		done; \
	done; \
	echo "three nodes ready (logs in $$d); try:"; \
	echo "  $(BIN) status --http $$h:$$((b+20))"; \
	echo "  $(BIN) acquire --servers $$h:$$b,$$h:$$((b+1)),$$h:$$((b+2)) --lease 30s demo"; \
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

## chaos: the fault-injection history test (TestClusterChaos; needs root and iproute2) for
## CHAOS_DURATION on a cluster of each size in CHAOS_NODES, in network namespaces: kill -9,
## SIGSTOP, partitions, kill of every node, rolling SIGTERM restarts, a follower replaced by a
## new node (peers remove, --join) and a node whose disk was wiped started again under its id,
## under a contended workload; it checks the recorded history (no two holders, tokens rising,
## no term with two leaders) and prints a summary. Then TestChaosUpgrade: the same workload
## for CHAOS_DURATION while three nodes roll from the previous build (built from git) to this
## one and back, every answer definite outside a restart's ride-through. LATCH_CHAOS_SEED=N
## repeats a run's schedule. `make test` runs a 60 s 3-node version of the first.
chaos:
	@[ "$$(id -u)" = 0 ] || { echo "make chaos needs root (it creates network namespaces)"; exit 1; }
	@for n in $(CHAOS_NODES); do \
		echo "== chaos: $$n nodes, $(CHAOS_DURATION)"; \
		LATCH_CHAOS_NODES=$$n LATCH_CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -count=1 -v -timeout 2h \
			-run '^TestClusterChaos$$' ./cmd/latch/ || exit 1; \
	done
	@echo "== chaos: upgrade and back, 3 nodes, $(CHAOS_DURATION)"
	LATCH_CHAOS_UPGRADE=1 LATCH_CHAOS_NODES=3 LATCH_CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -count=1 -v -timeout 2h \
		-run '^TestChaosUpgrade$$' ./cmd/latch/

## soak: TestClusterChaos in soak mode (LATCH_CHAOS_MODE=soak; root) on 3 nodes for
## SOAK_DURATION (at most 60m): the workload under SIGSTOPs and partitions (of the leader, of a
## minority), but no kill or restart (the choice: a restarted node starts fresh, so every node
## stays one process and its figures compare over the whole run). Each node's RSS
## (/proc/PID/status VmRSS), descriptors (/proc/PID/fd) and goroutines (/metrics
## go_goroutines) are sampled about every 30 s, between faults; each worker talks to one node,
## so client connections do not drift between nodes; and it fails if any figure grew by more
## than 20% from the sample nearest a sixth of the run (minute 10 of 60, minute 1 of
## SOAK_DURATION=6m) taken in the same role (leader or follower) to the last, or on anything
## the chaos checks find. Not in CI.
soak:
	@[ "$$(id -u)" = 0 ] || { echo "make soak needs root (it creates network namespaces)"; exit 1; }
	LATCH_CHAOS_MODE=soak LATCH_CHAOS_NODES=3 LATCH_CHAOS_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -v -timeout 3h \
		-run '^TestClusterChaos$$' ./cmd/latch/

## test-deploy: the deploy module (its own go.mod, so Kubernetes libraries stay out of latch):
## renders deploy/k8s with kustomize, decodes every object strictly into the API types, and
## runs the StatefulSet's pod args as real processes on 127.0.0.19-24 (ports 7400-7402), and
## checks the monitoring kit (deploy/monitoring: promtool, the dashboard, metric names).
test-deploy:
	cd deploy && $(GO) vet ./... && $$($(GO) -C .. tool -n staticcheck) ./... && $(GO) test -count=1 -timeout 10m ./...

## image: the container image (deploy/container/Dockerfile), where Docker is present.
image:
	@command -v docker >/dev/null || { echo "make image needs docker"; exit 1; }
	docker build -f deploy/container/Dockerfile --build-arg VERSION=$(VERSION) \
		--build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
		--build-arg CREATED=$$(git log -1 --format=%cI HEAD 2>/dev/null || echo unknown) -t $(IMAGE):$(or $(VERSION),dev) .

## release: a release into dist/ (make release VERSION=vX.Y.Z, run on the commit tagged VERSION; docs/CHANGELOG.md
## must have a "## VERSION" section): static binaries latch-VERSION-GOOS-GOARCH for RELEASE_PLATFORMS, the
## k8s overlays and compose file stamped with the image ghcr.io/latchd/latch:VERSION, the CHANGELOG section,
## the image for linux/amd64 and linux/arm64 as an OCI archive (with docker buildx; IMAGES=auto skips it
## without, saying so; require or skip), and SHA256SUMS. Reproducible: the same commit gives the same binaries.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
IMAGES            ?= auto
release:
	@cd deploy && $(GO) build -o ../bin/latch-release ./cmd/release
	./bin/latch-release -version "$(VERSION)" -root . -out dist -platforms "$(RELEASE_PLATFORMS)" -images "$(IMAGES)"

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
	rm -rf bin dist
