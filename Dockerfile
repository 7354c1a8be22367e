# One image for every stage: crawl-dedup <stage> ... (docker-compose.yml runs all three).
#
# Two stages. "build" makes the wheel as `python -m build` does anywhere (the sdist, then the wheel
# from it, its hot path compiled with mypyc: that needs a C compiler, which stays in this stage).
# "runtime" installs only that wheel, pinned by constraints.txt, into a slim image and runs it as
# a non-root user: no compiler, no sources, no build tools.
FROM python:3.11.14-slim AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
# What the sdist holds (MANIFEST.in): the package, its schemas, the build script and the pins.
COPY pyproject.toml setup.py MANIFEST.in README.md constraints.txt ./
COPY schemas ./schemas
COPY kafka ./kafka
COPY tools/kafka_release.py ./tools/
COPY streams ./streams
RUN pip install --no-cache-dir build==1.6.1 && python -m build --outdir /dist .

FROM python:3.11.14-slim AS runtime
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /dist/*.whl /tmp/
COPY constraints.txt /tmp/
RUN pip install --no-cache-dir -c /tmp/constraints.txt /tmp/*.whl && rm /tmp/*.whl /tmp/constraints.txt \
    && useradd --create-home --uid 10001 crawl \
    && mkdir -p /state && chown crawl /state && chmod 700 /state
USER crawl
WORKDIR /home/crawl
ENV STREAMS_RUNTIME_STATE_DIR=/state
# Prometheus metrics (/metrics): url-dedup 9410, content-seen 9411, revisit 9412, first-seen 9413.
# A worker listens on 127.0.0.1 unless STREAMS_METRICS_HOST says otherwise (compose sets 0.0.0.0).
EXPOSE 9410 9411 9412 9413
ENTRYPOINT ["crawl-dedup"]
