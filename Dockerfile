# Canopy's container image: the static canopy binary alone, FROM scratch
# (no shell, no libc, no package manager). Build the binary on the host
# first, then the image (docker-compose.yml does the second step):
#
#   CGO_ENABLED=0 go build -o canopy ./cmd/canopy
#   docker build -t canopy .
#
# The binary must be static (CGO_ENABLED=0): scratch has no dynamic loader.
# It is built on the host rather than in a golang builder stage so that the
# image builds where no image can be pulled.
FROM scratch
COPY canopy /canopy
# gRPC (clients and peers) and HTTP (status page, metrics, health).
EXPOSE 26257 8080
VOLUME /data
# The binary checks itself: no curl in scratch. Ready means initialized, a
# member of the cluster and caught up (docs/OPERATIONS.md, "Health").
# The default command runs insecure (no TLS, no authentication); with
# certificates mounted at /certs, run `start --certs-dir /certs ...` and
# set the health check's --certs-dir /certs instead of --insecure (HTTPS).
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=3 \
    CMD ["/canopy", "health", "--http-addr", "127.0.0.1:8080", "--insecure"]
ENTRYPOINT ["/canopy"]
CMD ["start", "--insecure", "--store", "/data", "--listen", "0.0.0.0:26257", "--http-addr", "0.0.0.0:8080"]
