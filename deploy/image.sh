#!/bin/sh
# image.sh BINARY IMAGE [VERSION] builds notifyd's OCI image with buildah, from
# scratch: the static binary at /notifyd, the host's CA bundle at
# /etc/ssl/certs/ca-certificates.crt (where Go's crypto/x509 looks first), the
# numeric user 65532 (no /etc/passwd, no shell, nothing else). `make image`
# runs it with bin/notifyd built by `make build` (CGO_ENABLED=0).
set -eu

bin=$1
image=$2
version=${3:-$(cat "$(dirname "$0")/../VERSION")}
certs=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

if ! command -v buildah >/dev/null 2>&1; then
	echo "image.sh: buildah is not installed (Debian: apt-get install buildah)" >&2
	exit 1
fi
if [ ! -r "$certs" ]; then
	echo "image.sh: no CA bundle at $certs (Debian: apt-get install ca-certificates)" >&2
	exit 1
fi

ctr=$(buildah from scratch)
trap 'buildah rm "$ctr" >/dev/null' EXIT
buildah copy --chmod 0555 "$ctr" "$bin" /notifyd >/dev/null
buildah copy --chmod 0444 "$ctr" "$certs" /etc/ssl/certs/ca-certificates.crt >/dev/null
buildah config \
	--user 65532:65532 \
	--workingdir / \
	--entrypoint '["/notifyd"]' \
	--cmd '["run", "-config", "/etc/notifyd/config.yaml"]' \
	--port 8080/tcp \
	--stop-signal SIGTERM \
	--label org.opencontainers.image.title=notifyd \
	--label org.opencontainers.image.version="$version" \
	"$ctr"
buildah commit --quiet --format oci --rm "$ctr" "$image" >/dev/null
trap - EXIT
echo "$image"
