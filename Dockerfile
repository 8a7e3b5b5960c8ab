# tsd: the daemon on the embedded store, port 4242.
#   docker build -t tsd . && docker run -p 4242:4242 -v tsd-data:/data tsd
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tsd ./tsd
RUN pip install --no-cache-dir .
VOLUME /data
EXPOSE 4242
ENTRYPOINT ["tsdb", "tsd"]
CMD ["--port", "4242", "--data-dir", "/data"]
