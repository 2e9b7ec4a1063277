# syntax=docker/dockerfile:1
#
# offpeak in a container: build the single executable with Bun, then run it
# alone (no Bun, no node_modules, no source) on a minimal glibc base as a
# non-root user, with the data directory on a volume.
#
#   docker build -t offpeak .
#   docker run -d --name offpeak -p 127.0.0.1:8080:8080 -v offpeak-data:/data \
#     -e OFFPEAK_ADMIN_KEY=sk-my-admin-key offpeak
#   docker exec offpeak offpeak batches list      # the client verbs use OFFPEAK_ADMIN_KEY here
#
# See docs/OPERATING.md.

ARG BUN_VERSION=1.4.5

# ── build ────────────────────────────────────────────────────────────────
FROM oven/bun:${BUN_VERSION} AS build
WORKDIR /src

# Dependencies first, so that a code change does not reinstall them. Only the
# runtime dependencies are needed to compile (bun reads the versions from
# package-lock.json); --ignore-scripts skips downloading another Bun.
COPY package.json package-lock.json ./
RUN bun install --production --ignore-scripts

COPY tsconfig.json bunfig.toml ./
COPY scripts ./scripts
COPY drizzle ./drizzle
COPY drizzle-pg ./drizzle-pg
COPY src ./src
# `npm run build`: embeds the migrations, then bun build --compile (with the Worker entry points).
RUN bun run build && ./dist/offpeak --help > /dev/null

# distroless has no shell to create the volume's mount point with the right owner;
# 0700 as offpeak makes its data directory (a new named volume takes this mode).
RUN mkdir -p -m 0700 /rootfs/data

# ── run ──────────────────────────────────────────────────────────────────
# glibc + libstdc++ + CA certificates, nothing else; runs as uid 65532 (nonroot).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/dist/offpeak /usr/local/bin/offpeak
COPY --from=build --chown=65532:65532 /rootfs/data /data

ENV HOST=0.0.0.0 \
    PORT=8080 \
    OFFPEAK_DATA_DIR=/data \
    OFFPEAK_LOG_LEVEL=info
USER 65532:65532
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080

# SIGTERM checkpoints running batches and exits 0 within 10 s (give it 15:
# docker stop -t 15, compose stop_grace_period, k8s terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
# No curl in distroless: the binary probes its own /healthz (on 127.0.0.1:$PORT).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 CMD ["/usr/local/bin/offpeak", "healthcheck"]

ENTRYPOINT ["/usr/local/bin/offpeak"]
CMD ["serve"]
