# tsd: the daemon on the embedded store, port 4242, as scripts/tsd runs it (new metrics
# created on write), as an unprivileged user, with a health check on /api/version.
#   docker build -t tsd . && docker run -p 4242:4242 -v tsd-data:/data tsd
# The health check asks port 4242: keep it when passing other flags.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tsd ./tsd
RUN pip install --no-cache-dir . \
    && useradd --system --uid 4242 --user-group --home-dir /data --no-create-home tsd \
    && mkdir -p /data && chown tsd:tsd /data
USER tsd
VOLUME /data
EXPOSE 4242
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4242/api/version', timeout=2)"]
ENTRYPOINT ["tsdb", "tsd", "--auto-metric"]
CMD ["--port", "4242", "--data-dir", "/data"]
