# One image for every stage: python -m streams <stage> ... (docker-compose.yml runs all three).
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# What the package needs at run time: its code and the JSON schemas it reads from ../schemas
# (streams/records.py); pyproject.toml lists the dependencies (prometheus-client among them),
# constraints.txt pins them, README.md is the package's readme. setup.py compiles the hot path with mypyc, which needs a C compiler at build time only.
COPY pyproject.toml constraints.txt README.md setup.py ./
COPY streams ./streams
COPY schemas ./schemas
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --no-cache-dir -c constraints.txt -e . \
    && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/* build \
    && useradd --create-home --uid 10001 crawl \
    && mkdir -p /state && chown crawl /state && chmod 700 /state
USER crawl
ENV STREAMS_RUNTIME_STATE_DIR=/state
# Prometheus metrics (/metrics): url-dedup 9410, content-seen 9411, revisit 9412, first-seen 9413.
# A worker listens on 127.0.0.1 unless STREAMS_METRICS_HOST says otherwise (compose sets 0.0.0.0).
EXPOSE 9410 9411 9412 9413
ENTRYPOINT ["python", "-m", "streams"]
