# One multi-call binary, `clankie`, runs every service (`clankie gateway|captain|voice-floor|media|
# loopback|model-standin`) and the operator's commands. Targets:
#   runtime (default)  every service, no browser: the small image
#   browser            runtime plus Debian's Chromium and chromedriver, for the captain's browse tool
#   speech             runtime plus Python and the local speech service's pinned engines (faster-whisper,
#                      Piper, Smart Turn), installed at build time: `clankie speech` downloads nothing
#   debug-symbols      the binary's debug info alone: docker build --target debug-symbols -o symbols .
FROM rust:1-bookworm AS build
# libopus-dev (found through pkg-config) is the voice body's and the loopback voice server's Opus.
RUN apt-get update && apt-get install -y --no-install-recommends cmake pkg-config libopus-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin clankie \
 && mkdir /out \
 && objcopy --only-keep-debug target/release/clankie /out/clankie.debug \
 && objcopy --strip-all --add-gnu-debuglink=/out/clankie.debug target/release/clankie /out/clankie

FROM scratch AS debug-symbols
COPY --from=build /out/clankie.debug /

FROM debian:bookworm-slim AS base
# apt's lists and package caches go in the same layer (the official slim image's docker-clean
# hook does this too; a hand-made base may lack it).
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libopus0 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
 && useradd --system --uid 10001 --home /var/lib/clankie --create-home clankie \
 && install -d -o clankie -g clankie /var/lib/clankie/attachments
# The attachment root exists in the image, owned by the service user, so a named volume mounted
# there starts owned by it too (Docker copies the directory's owner into an empty volume).
COPY --from=build /out/clankie /usr/local/bin/clankie
USER clankie
ENV CLANKIE_STATE_DIR=/var/lib/clankie CLANKIE_HTTP_ADDR=0.0.0.0:9470
EXPOSE 9470
HEALTHCHECK --interval=10s --timeout=3s --retries=3 CMD clankie health
ENTRYPOINT []
CMD ["clankie", "--help"]

FROM base AS browser
USER root
RUN apt-get update && apt-get install -y --no-install-recommends chromium chromium-driver fonts-dejavu-core \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb
USER clankie

FROM base AS speech
USER root
# Piper is GPL-3.0: it runs as this container's own process and is never linked into clankie.
ENV CLANKIE_TOOLS_DIR=/opt/clankie-tools
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
 && clankie speech --install-only && rm -rf /root/.cache/pip
USER clankie
EXPOSE 8788
HEALTHCHECK --interval=10s --timeout=3s --retries=3 CMD clankie health http://127.0.0.1:8788/healthz
CMD ["clankie", "speech", "--host", "0.0.0.0"]

FROM base AS runtime
