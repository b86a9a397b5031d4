# The ferryman server image. Every role is a `ferryman` command:
#   docker run IMAGE            the API, a worker and the sweeper in one process (serve)
#   docker run IMAGE api        the HTTP API alone
#   docker run IMAGE worker     a worker (and a sweeper)
# compose.yaml runs an API and two workers on one volume, compose.postgres.yaml the same
# on PostgreSQL; docs/operations.md, "Run in containers", says what each can and cannot do.
FROM python:3.11-slim

LABEL org.opencontainers.image.title="ferryman" \
      org.opencontainers.image.description="Durable jobs for slow, costly foundation-model calls" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A system user of its own: nothing ferryman does needs root.
RUN groupadd --system --gid 10001 ferryman \
    && useradd --system --uid 10001 --gid ferryman --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin ferryman

# Which of ferryman's extras the image carries: `server` (the default) runs every role
# on SQLite or PostgreSQL; `aws` adds the Bedrock provider (boto3). Several are comma-
# separated: docker build --build-arg EXTRAS=aws .
ARG EXTRAS=server

# Only what the package needs to build: the context leaves out tests, docs and local
# databases (.dockerignore).
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
RUN pip install ".[${EXTRAS}]" && cd / && rm -rf /src

# The database and the results live on the volume, owned by the ferryman user. The
# working directory is the volume too, so a ferryman.toml placed there is read.
WORKDIR /data
RUN chown ferryman:ferryman /data
VOLUME ["/data"]
ENV FERRYMAN_DATABASE_URL=sqlite:////data/ferryman.db \
    FERRYMAN_RESULTS_URL=file:///data/results \
    FERRYMAN_HOST=0.0.0.0 \
    FERRYMAN_PORT=8000

USER ferryman
EXPOSE 8000

# Liveness of the API (slim images have no curl): any answer but 200 from /healthz, or
# none within the timeout, fails. A worker serves no HTTP: compose.yaml turns this off
# for workers.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('FERRYMAN_PORT', '8000'), timeout=4)"

ENTRYPOINT ["ferryman"]
CMD ["serve"]
