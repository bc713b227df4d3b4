# The lakeswap binary in a small image, as examples/schedule/k8s-indexed-job.yaml runs it:
#   docker build -t registry.example.com/lakeswap:0.1.0 .
# Multi-stage: the build stage compiles; the image holds the binary, CA certificates (for S3,
# Azure and GCS over TLS) and nothing else, and runs as a non-root user.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --profile dist --locked --bin lakeswap

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin lakeswap
COPY --from=build /src/target/dist/lakeswap /usr/local/bin/lakeswap
USER 10001
ENTRYPOINT ["lakeswap"]
CMD ["--help"]
