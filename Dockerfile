# slipway: one static binary. Build: docker build -t slipway .
# The build stage mirrors scripts/build (static, -trimpath, version stamped
# through -ldflags); pass VERSION/COMMIT/DATE as build args from git.
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=v0.0.0-dev
ARG COMMIT=unknown
ARG DATE=unknown
ARG TARGETOS=linux
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -tags urfave_cli_no_docs \
      -ldflags "-s -w -X slipway.dev/slipway/version.Version=${VERSION} -X slipway.dev/slipway/version.Commit=${COMMIT} -X slipway.dev/slipway/version.Date=${DATE}" \
      -o /out/bin/slipway ./cmd/slipway
# Multi-call names: the kubectl plugin, and the old update operator's names.
RUN cd /out/bin && for n in kubectl-eds dogswatch bottlerocket-update-operator; do ln -s slipway "$n"; done

FROM scratch
# CA roots for https and github-releases:// channels.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# slipway's license (Apache-2.0), where ocipack's image carries it too.
COPY LICENSE /usr/share/doc/slipway/LICENSE
# A directory copy keeps the symlinks as symlinks.
COPY --from=build /out/bin/ /usr/bin/
# Not root by default (ocipack's User): the node agents and upgrade Jobs,
# which need root, say runAsUser: 0 in their own securityContext.
USER 65532:65532
ENTRYPOINT ["/usr/bin/slipway"]
