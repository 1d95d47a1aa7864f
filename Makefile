# Weir — see README.md. `make help` lists the targets.
GO            ?= go
BIN           := bin/weir
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
PROTOC_GEN_GO_VT   := github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.1-0.20240319094008-0393e58bdf10
TOOLS         := $(CURDIR)/bin/tools

IMAGE         ?= weir:dev
FUZZTIME      ?= 10s

.PHONY: help build test scale lint bench bench-micro bench-short proto run clean image chaos fuzz sim sim-find

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/weir (static, CGO_ENABLED=0)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/weir

image: build ## build bin/weir and the FROM scratch image $(IMAGE) (deploy/Dockerfile; nothing is pulled)
	rm -rf bin/image && mkdir -p bin/image/data && cp $(BIN) bin/image/weir
	docker build -q -t $(IMAGE) -f deploy/Dockerfile bin/image

chaos: image ## the chaos suite (needs docker): faults on 3 nodes in containers, the table of docs/operations.md; then the compose file
	@run=weirchaos$$(date +%s)$$$$; \
	  echo "WEIR_CHAOS_RUN=$$run go test -tags chaos -count=1 -timeout 8m -v ./test/chaos/"; \
	  WEIR_CHAOS_IMAGE=$(IMAGE) WEIR_CHAOS_RUN=$$run $(GO) test -tags chaos -count=1 -timeout 8m -v ./test/chaos/; rc=$$?; \
	  test/chaos/cleanup.sh $$run; exit $$rc

test: lint ## lint, every test with the race detector, then the hand-off's tests built with the re-inserted defects' switches (tag weirbugs)
	$(GO) test -race -count=1 -timeout 12m ./...
	$(GO) test -race -count=1 -timeout 5m -tags weirbugs ./replication/... ./internal/bug/...
	cd deploy/helm/rendertest && $(GO) test -count=1 ./...   # the Helm chart against deploy/kubernetes (its own module: Helm's dependencies)

scale: ## 16 `weir node` processes on loopback (test/scale_test.go): one ring, balance within ±25%, at most 5 voters, exact after a SIGKILL and a join; idle CPU and RSS per node
	WEIR_SCALE=1 $(GO) test -count=1 -timeout 5m -run '^TestSixteenProcesses$$' -v ./test/

SEEDS ?=
NODES ?=
SEED  ?=
BUG   ?=
CASE  ?=
RING  ?=
sim: SHELL := /bin/bash
sim: ## the whole-cluster simulator (sim/): the CI mix; SEEDS=N NODES=n a search; SEED=S [NODES=n] replays one seed with its trace, CASE=path a kept case; RING="P V layout" another ring shape; BUG=name a bug switch (-tags weirbugs)
	@set -o pipefail; echo "WEIR_SIM=1 WEIR_SIM_SEEDS=$(SEEDS) WEIR_SIM_NODES=$(NODES) WEIR_SIM_SEED=$(SEED) WEIR_SIM_CASE=$(CASE) WEIR_SIM_RING='$(RING)' WEIR_SIM_BUG=$(BUG) go test $(if $(BUG),-tags weirbugs) -run '^(TestSimSearch|TestSim64Nodes)$$' -v ./sim"; \
	  WEIR_SIM=1 WEIR_SIM_SEEDS=$(SEEDS) WEIR_SIM_NODES=$(NODES) WEIR_SIM_SEED=$(SEED) WEIR_SIM_CASE=$(if $(CASE),$(abspath $(CASE))) WEIR_SIM_RING='$(RING)' WEIR_SIM_BUG=$(BUG) \
	  $(GO) test $(if $(BUG),-tags weirbugs) -count=1 -timeout 60m -run '^(TestSimSearch|TestSim64Nodes)$$' -v ./sim \
	  | grep -v -e '^=== RUN' -e '^--- ' -e '^PASS$$' -e '^FAIL$$' -e '^ok ' -e '^FAIL\s'

sim-find: ## seeds-to-find of one bug switch: make sim-find BUG=name [NODES=n] (20 seed streams, at most 100 seeds each)
	WEIR_SIM_FIND=1 WEIR_SIM_BUG=$(BUG) WEIR_SIM_NODES=$(NODES) $(GO) test -tags weirbugs -count=1 -timeout 60m -run '^TestSimSeedsToFind$$' -v ./sim | grep -v -e '^=== RUN' -e '^--- ' -e '^PASS$$' -e '^ok '

fuzz: ## every fuzz target (func FuzzX in *_test.go) for FUZZTIME each (default 10s), one target per go test run (test/fuzz.sh)
	GO=$(GO) FUZZTIME=$(FUZZTIME) test/fuzz.sh

lint: ## go vet, gofmt check, go mod tidy check
	$(GO) vet ./...
	$(GO) vet -tags chaos ./test/chaos/
	$(GO) vet -tags weirbugs ./replication/... ./internal/bug/...
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@cp go.mod /tmp/weir.go.mod.bak; cp go.sum /tmp/weir.go.sum.bak; $(GO) mod tidy; \
	  if ! git diff --quiet -- go.mod go.sum; then echo "go mod tidy changes go.mod/go.sum"; git diff -- go.mod go.sum; cp /tmp/weir.go.mod.bak go.mod; cp /tmp/weir.go.sum.bak go.sum; exit 1; fi
	@cd deploy/helm/rendertest && $(GO) vet ./... && { $(GO) mod tidy -diff || { echo "go mod tidy changes deploy/helm/rendertest/go.mod"; exit 1; }; }

bench: bench-micro bench-short ## the micro-benchmarks, then a short `weir bench` preset

bench-micro: ## Go micro-benchmarks of the pure cores and the shard engine
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1s ./bucket ./ring ./rulesraft/rules ./node/shard

bench-short: build ## a short `weir bench` preset: 3 spawned nodes, then redis-server (if installed), back to back
	@if command -v redis-server >/dev/null; then r=--spawn-redis; \
	  else echo "redis-server missing (apt-get install -y redis-server): weir only"; r=; fi; \
	  echo ./$(BIN) bench --scenario steady --spawn 3 --duration 5s $$r; \
	  ./$(BIN) bench --scenario steady --spawn 3 --duration 5s $$r

proto: ## regenerate proto/weirv1 from proto/weir/v1/*.proto (pinned generators)
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler"; exit 1; }
	GOBIN=$(TOOLS) $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$(TOOLS) $(GO) install $(PROTOC_GEN_GO_GRPC)
	GOBIN=$(TOOLS) $(GO) install $(PROTOC_GEN_GO_VT)
	PATH=$(TOOLS):$$PATH protoc -I proto \
	  --go_out=proto --go_opt=module=github.com/weirlimit/weir/proto \
	  --go-grpc_out=proto --go-grpc_opt=module=github.com/weirlimit/weir/proto \
	  --go-vtproto_out=proto --go-vtproto_opt=module=github.com/weirlimit/weir/proto,features=marshal+unmarshal+size \
	  proto/weir/v1/weir.proto

run: build ## start `weir dev`: one node with the example rules
	./$(BIN) dev

clean: ## remove build output
	rm -rf bin
