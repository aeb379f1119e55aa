# notifyd developer tasks. `make test` needs nothing but Go and the PostgreSQL
# server programs: it starts a throwaway cluster (cmd/withpg).

GO ?= go

# FUZZ lists fuzz targets that `make test` runs briefly after the tests, as
# package:FuzzName pairs, e.g. FUZZ = ./config:FuzzLoad ./channels/webhook:FuzzSign
FUZZ ?= ./internal/httpapi:FuzzSendParams ./config:FuzzValidateParams ./channels:FuzzPreferenceRules ./internal/httpapi:FuzzInboxCursor ./internal/httpapi:FuzzKeyCursor ./channels/email:FuzzEmailTemplates ./internal/stream:FuzzParseCursor
# FUZZTIME is an execution count (Nx), not a duration: with a duration Go
# 1.26's fuzz coordinator can report a spurious "context deadline exceeded"
# failure when the deadline fires while a worker is mid-input (go.dev/issue/75804,
# fixed in Go 1.27). A count has no deadline to race. 25000 inputs take 5-40 s
# per target on 2 cores with a cold cache (a fresh clone: the whole fuzz step took
# 6 minutes at 50000); override with e.g. FUZZTIME=30s for a longer local run.
FUZZTIME ?= 25000x
# FUZZMINIMIZE bounds the minimisation of each input that finds new coverage
# (and of a failing one) by executions too: at Go's default of 60 s, every new
# input stalled a target for up to a minute (one CI run spent 88 s on one
# target), and a fresh machine, with an empty fuzz cache, finds many.
FUZZMINIMIZE ?= 500x

# STATICCHECK is the staticcheck that `make lint` runs, pinned by version and
# fetched through the Go module proxy by `go run` (built once, then cached).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# RACE lists the packages whose goroutines share state (the River workers and
# their stores, the stream's fan-in, the daemon's lifecycle): `make test` runs
# them under the race detector, in place of their plain run.
RACE ?= ./jobs ./stores ./internal/stream ./server
# RACEFLAGS narrows the race run where it would not fit CI's time. RACE= (empty)
# runs every package plainly.
RACEFLAGS ?=

# VERSION is the release stamped into the binary (internal/version.Version).
VERSION := $(shell cat VERSION)
LDFLAGS := -s -w -X github.com/notifyd/notifyd/internal/version.Version=$(VERSION)

.PHONY: test lint fmtcheck staticcheck fuzz run bench chaos build image vet fmt

# lint fails on unformatted files, go vet and staticcheck findings; `make
# test` runs it first.
lint: fmtcheck vet staticcheck

fmtcheck:
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path '*/node_modules/*' -not -path './.git/*')); \
	if [ -n "$$out" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$out"; exit 1; fi

staticcheck:
	$(GO) run $(STATICCHECK) ./...

test: lint
	@# The Node client's and example's tests (clients/clients_test.go) need their packages.
	@if command -v npm >/dev/null 2>&1 && [ ! -d clients/node/node_modules ]; then \
		echo "npm ci in clients/node"; (cd clients/node && npm ci --no-audit --no-fund); fi
	@if command -v npm >/dev/null 2>&1 && [ ! -d clients/node/testdata/drivers/node_modules ]; then \
		echo "npm ci in clients/node/testdata/drivers"; (cd clients/node/testdata/drivers && npm ci --no-audit --no-fund); fi
	@if command -v npm >/dev/null 2>&1 && [ ! -d examples/node-express/node_modules ]; then \
		echo "npm ci in examples/node-express"; (cd examples/node-express && npm ci --no-audit --no-fund); fi
	@# The front-end packages' test (web/react_browser_test.go) builds, packs and
	@# installs them; clients/react links clients/browser; testdata/react18 is
	@# the React 18 its server rendering test renders with.
	@for dir in clients/browser clients/react clients/react/testdata/react18; do \
		if command -v npm >/dev/null 2>&1 && [ ! -d $$dir/node_modules ]; then \
			echo "npm ci in $$dir"; (cd $$dir && npm ci --no-audit --no-fund); fi; done
	@# The OpenAPI tools test (internal/httpapi/openapi_tools_test.go) runs the
	@# generators pinned there.
	@if command -v npm >/dev/null 2>&1 && [ ! -d internal/httpapi/testdata/openapi-tools/node_modules ]; then \
		echo "npm ci in internal/httpapi/testdata/openapi-tools"; \
		(cd internal/httpapi/testdata/openapi-tools && npm ci --no-audit --no-fund); fi
ifeq ($(strip $(RACE)),)
	$(GO) run ./cmd/withpg -- $(GO) test -count=1 -timeout 9m ./...
else
	@# Every package once: those in RACE under the race detector, the rest plainly.
	$(GO) run ./cmd/withpg -- sh -c '$(GO) test -count=1 -timeout 9m $$($(GO) list ./... | grep -vxF "$$($(GO) list $(RACE))") && \
		$(GO) test -race -count=1 -timeout 15m $(RACEFLAGS) $(RACE)'
endif
ifneq ($(strip $(FUZZ)),)
	$(GO) run ./cmd/withpg -- $(MAKE) --no-print-directory fuzz
endif

# fuzz runs each FUZZ target for FUZZTIME (go test fuzzes one package and one
# target at a time). Without TEST_DATABASE_URL, database tests start a private
# cluster per package.
fuzz:
	@set -e; for target in $(FUZZ); do \
		pkg=$${target%%:*}; name=$${target#*:}; \
		echo "fuzz $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) "$$pkg"; \
	done

# LISTEN moves the dev daemon off config.example.yaml's http.listen:
# make run LISTEN=127.0.0.1:9090
LISTEN ?=
run:
	$(GO) run ./cmd/notifyd dev -config config.example.yaml $(if $(LISTEN),-listen $(LISTEN))

bench:
	$(GO) run ./bench

# SOAK is how long the soak scenario sends (at most 10m).
SOAK ?= 4m

chaos:
	$(GO) run ./bench/chaos -soak $(SOAK)

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/notifyd ./cmd/notifyd

# image builds the OCI image notifyd:$(VERSION) with buildah (deploy/image.sh):
# from scratch, the static binary, the host's CA certificates, user 65532.
IMAGE ?= localhost/notifyd:$(VERSION)
image: build
	deploy/image.sh bin/notifyd $(IMAGE)

vet:
	$(GO) vet ./...

fmt:
	gofmt -s -w .
