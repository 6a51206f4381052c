# zper image, multi-stage, for machines that can pull `rust` and `debian` images from a
# registry. Without a registry use scripts/docker-image.sh, which builds the same image
# (`zper:local`) from the host-built binary on an empty base.
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libclang-dev g++ libsodium-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p zper && strip target/release/zper && cp target/release/zper /zper

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --user-group --home-dir /data zper \
    && mkdir -p /data /etc/zper && chown 10001:10001 /data
COPY --from=build /zper /usr/local/bin/zper
COPY deploy/server.properties /etc/zper/server.properties
USER 10001:10001
VOLUME ["/data"]
# writer, reader, ack, controller, replication, Dolly updates/snapshots/requests, HTTP admin
EXPOSE 5555 5556 5557 5558 5559 5560 3264 3265 3266 9644
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 \
    CMD ["zper", "cluster", "ready", "--admin", "127.0.0.1:9644"]
ENTRYPOINT ["zper", "--config", "/etc/zper/server.properties"]
CMD ["run"]
