# Builds every Clankie binary once; each service runs the same image with its own command.
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked \
      --bin clankie --bin clankie-gateway --bin clankie-captain --bin clankie-voice-floor --bin clankie-media \
      --bin clankie-discord-loopback --bin clankie-model-standin \
 && mkdir /out \
 && cp target/release/clankie target/release/clankie-gateway target/release/clankie-captain \
       target/release/clankie-voice-floor target/release/clankie-media target/release/clankie-discord-loopback \
       target/release/clankie-model-standin /out/

FROM debian:bookworm-slim
# The captain's `browse` tool drives Debian's Chromium through chromedriver; WITH_BROWSER=0
# builds a smaller image in which the tool is off (CLANKIE_BROWSE=auto finds no browser).
ARG WITH_BROWSER=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && if [ "$WITH_BROWSER" = "1" ]; then apt-get install -y --no-install-recommends chromium chromium-driver fonts-dejavu-core; fi \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /var/lib/clankie --create-home clankie
COPY --from=build /out/ /usr/local/bin/
USER clankie
ENV CLANKIE_STATE_DIR=/var/lib/clankie CLANKIE_HTTP_ADDR=0.0.0.0:9470
EXPOSE 9470
ENTRYPOINT []
CMD ["clankie", "--help"]
