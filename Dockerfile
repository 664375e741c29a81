# A small static image: strata (the member, grpc-proxy and gateway) and
# stratautl, and nothing else. deploy/helm/strata runs it.
#   docker build -t strata:0.1.0 .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/strata ./cmd/strata && \
    CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/stratautl ./cmd/stratautl && \
    mkdir -p /out/var/lib/strata

FROM scratch
COPY --from=build /out/strata /out/stratautl /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/var/lib/strata /var/lib/strata
USER 65532:65532
EXPOSE 2379 2380 2381
ENTRYPOINT ["/usr/local/bin/strata"]
