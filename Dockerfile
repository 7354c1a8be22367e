# One image for every stage: python -m streams <stage> ...
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY streams ./streams
COPY schemas ./schemas
RUN pip install --no-cache-dir -c constraints.txt -e . \
    && useradd --create-home --uid 10001 crawl && mkdir -p /state && chown crawl /state
USER crawl
ENV STREAMS_RUNTIME_STATE_DIR=/state
ENTRYPOINT ["python", "-m", "streams"]
