# syntax=docker/dockerfile:1
# Two images, each with its own program's dependencies only (docs/deploy.md):
#   docker build -t app-sidecar .                                    -> the sidecar (the default target)
#   docker build --target build-store -t app-sidecar-build-store .   -> the build store
#   docker run app-sidecar-build-store /app/dist/bin/build-store.js --help

# Build stage: compile TypeScript with the dev dependencies, for both packages.
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY packages/build-store/package.json packages/build-store/tsconfig.json ./packages/build-store/
COPY src ./src
# The sidecar's dist leaves out the build store and the demo that starts it (their packages are
# not in the sidecar's install); the build store's own dist is compiled from the same sources.
RUN npm run build \
    && npm run build --prefix packages/build-store \
    && rm -rf dist/build-store dist/bin/build-store.* dist/demo/start.*

# The build store: PGlite, pg and TypeBox, from packages/build-store's own lockfile.
FROM node:24-bookworm-slim AS build-store
ENV NODE_ENV=production \
    DATA_DIR=/app/data
WORKDIR /app
COPY packages/build-store/package.json packages/build-store/package-lock.json ./
# /app/data is the embedded store's folder, the only path the runtime user may write;
# the code stays root-owned, so the process cannot change it.
RUN npm ci --omit=dev --ignore-scripts \
    && npm cache clean --force \
    && mkdir -p /app/data \
    && chown 1000:1000 /app/data
COPY --from=build /src/packages/build-store/dist ./dist
# Numeric (the image's "node" user is 1000), so the kubelet can enforce runAsNonRoot.
USER 1000:1000
EXPOSE 7070
ENTRYPOINT ["node"]
CMD ["/app/dist/bin/build-store.js"]

# The sidecar (the default target): its production dependencies, plus OpenTelemetry (an optional
# peer of the package, loaded only when OTEL_EXPORTER_OTLP_ENDPOINT is set) so tracing works as is.
FROM node:24-bookworm-slim AS sidecar
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts \
    && npm cache clean --force
COPY --from=build /src/node_modules/@opentelemetry ./node_modules/@opentelemetry
COPY --from=build /src/dist ./dist
USER 1000:1000
# 8000 sidecar, 9090 sidecar admin.
EXPOSE 8000 9090
ENTRYPOINT ["node"]
CMD ["/app/dist/bin/app-sidecar.js"]
