#!/usr/bin/env bash
# Builds the `zper` image (default tag zper:local) without any registry: the host-built release
# binary and the few shared libraries it links (libstdc++, libgcc_s, libm, libc, the loader) on
# an empty (`FROM scratch`) base, with a non-root user, /data as a volume and a HEALTHCHECK
# (`zper cluster ready`, which asks the node's /v1/status/ready). Same entrypoint, ports and config as the multi-stage Dockerfile.
#   scripts/docker-image.sh            # build (cargo build --release first) and tag zper:local
#   IMAGE=zper:dev scripts/docker-image.sh
#   ZPER_BIN=path/to/zper scripts/docker-image.sh   # that binary, no cargo build (the chaos tests)
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-zper:local}
command -v docker >/dev/null || { echo "docker-image.sh: docker is not installed" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "docker-image.sh: the Docker daemon is not reachable" >&2; exit 1; }
if [ -n "${ZPER_BIN:-}" ]; then
  bin=$ZPER_BIN
else
  cargo build --release -q -p zper
  bin=${CARGO_TARGET_DIR:-target}/release/zper
fi
[ -x "$bin" ] || { echo "docker-image.sh: no zper binary at $bin" >&2; exit 1; }
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc/zper" "$ctx/empty"
strip -o "$root/usr/local/bin/zper" "$bin"
# The binary's shared libraries, at the paths the loader expects.
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }' | while read -r lib; do
  cp -L --parents "$lib" "$root"
done
cp deploy/server.properties "$root/etc/zper/server.properties"
printf 'root:x:0:0:root:/root:/sbin/nologin\nzper:x:10001:10001:zper:/data:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nzper:x:10001:\n' > "$root/etc/group"
printf 'hosts: files dns\n' > "$root/etc/nsswitch.conf"
cat > "$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY rootfs/ /
COPY --chown=10001:10001 empty/ /data/
COPY --chown=10001:10001 empty/ /tmp/
ENV PATH=/usr/local/bin
USER 10001:10001
VOLUME ["/data"]
EXPOSE 5555 5556 5557 5558 5559 5560 3264 3265 3266 9644
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 \
    CMD ["zper", "cluster", "ready", "--admin", "127.0.0.1:9644"]
ENTRYPOINT ["zper", "--config", "/etc/zper/server.properties"]
CMD ["run"]
DOCKERFILE
docker build -q -t "$IMAGE" "$ctx" >/dev/null
echo "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
