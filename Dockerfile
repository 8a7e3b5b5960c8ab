# tsd: the daemon on the embedded store, port 4242, as scripts/tsd runs it (new metrics
# created on write), as an unprivileged user, with a health check on /api/version.
#   docker build -t tsd . && docker run -p 4242:4242 -v tsd-data:/data tsd
# The data directory (/data, a volume) is in the ENTRYPOINT, so flags given to `docker run`
# or compose's `command:` (which replace CMD) keep it. The health check asks port 4242:
# keep it when passing other flags.
# tests/server/test_docker_build.py runs this file's build and install commands and its
# entrypoint (no Docker engine needed).

# -- build: a C compiler (the full image) builds tsd's compiled helpers into its wheel, and
# the wheels of every dependency beside it. TSD_REQUIRE_NATIVE: a helper that does not
# compile fails the build (setup.py) instead of leaving the image on the slower fallbacks.
FROM python:3.11 AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY tsd ./tsd
RUN TSD_REQUIRE_NATIVE=1 pip wheel --wheel-dir /wheels .

# -- runtime: the slim image, the wheels installed from the build stage only (no compiler,
# no index); `python -m tsd.native` fails the build unless every helper loads.
FROM python:3.11-slim
# root's: tsd cannot write here, so everything it writes goes under /data
WORKDIR /app
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels tsd \
    && rm -rf /wheels \
    && TSD_REQUIRE_NATIVE=1 python -m tsd.native \
    && useradd --system --uid 4242 --user-group --home-dir /data --no-create-home tsd \
    && mkdir -p /data && chown tsd:tsd /data
USER tsd
VOLUME /data
EXPOSE 4242
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4242/api/version', timeout=2)"]
ENTRYPOINT ["tsdb", "tsd", "--auto-metric", "--data-dir", "/data"]
CMD ["--port", "4242"]
