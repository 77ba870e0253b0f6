# syntax=docker/dockerfile:1
# One image for both bins: `app-sidecar` by default, `build-store` when the command names it:
#   docker run IMAGE                                  -> the sidecar
#   docker run IMAGE /app/dist/bin/build-store.js     -> the build store (args: in Kubernetes)
#   docker run IMAGE /app/dist/bin/build-store.js --help

# Build stage: compile TypeScript with the dev dependencies.
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

# Runtime stage: production dependencies and the compiled output only.
FROM node:24-bookworm-slim
ENV NODE_ENV=production \
    DATA_DIR=/app/data
WORKDIR /app
COPY package.json package-lock.json ./
# /app/data is the embedded store's folder, the only path the runtime user may write;
# the code stays root-owned, so the process cannot change it.
RUN npm ci --omit=dev --ignore-scripts \
    && npm cache clean --force \
    && mkdir -p /app/data \
    && chown 1000:1000 /app/data
COPY --from=build /src/dist ./dist
# Numeric (the image's "node" user is 1000), so the kubelet can enforce runAsNonRoot.
USER 1000:1000
# 8000 sidecar, 9090 sidecar admin, 7070 build store.
EXPOSE 8000 9090 7070
ENTRYPOINT ["node"]
CMD ["/app/dist/bin/app-sidecar.js"]
