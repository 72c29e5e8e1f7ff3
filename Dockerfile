# syntax=docker/dockerfile:1
# The priority-pubsub sidecar image.
#
#   docker build -t priority-pubsub .                        # sqs, gcp and azure drivers, journal upload
#   docker build --build-arg EXTRAS=sqs -t priority-pubsub:sqs .
#   docker run --read-only -v pp-data:/data -p 9464:9464 priority-pubsub
#
# The spark extra (the report job) is refused: it would add a JVM-sized dependency to every
# pod, and the report runs as its own Spark job (deploy/spark/).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: a virtualenv with the package and the chosen drivers' SDKs -------------------
# PYTHON_IMAGE names the base of both stages. The default is the public image; where no
# registry is reachable, scripts/image/build.sh passes a Debian base of the same release made
# from Debian packages (python3 + venv; see docs/deploy.md).
FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS="sqs,gcp,azure,redis,tracing,dapr,grpc,upload"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY priority_pubsub ./priority_pubsub
# A non-editable install: the wheel holds every package setuptools finds under priority_pubsub/.
RUN case ",${EXTRAS}," in \
      *,spark,*|*,all,*) echo "EXTRAS=${EXTRAS}: spark/all are not for the sidecar image" >&2; exit 1 ;; \
    esac; \
    spec="."; if [ -n "${EXTRAS}" ]; then spec=".[${EXTRAS}]"; fi; \
    /opt/venv/bin/pip install --no-cache-dir "${spec}" \
    && /opt/venv/bin/pip uninstall --yes --quiet pip setuptools \
    && /opt/venv/bin/python -m compileall -q /opt/venv \
    && /opt/venv/bin/priority-pubsub --help > /dev/null

# ---- runtime -------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG UID=10001
LABEL org.opencontainers.image.title="priority-pubsub" \
      org.opencontainers.image.description="Priority subscriber sidecar: queues per priority to your app as Dapr-compatible CloudEvents" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid "${UID}" priority-pubsub \
    && useradd --system --uid "${UID}" --gid "${UID}" --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin priority-pubsub \
    && mkdir -p /data /etc/priority-pubsub \
    && chown "${UID}:${UID}" /data
COPY --from=build /opt/venv /opt/venv
COPY deploy/docker/config.yaml /etc/priority-pubsub/config.yaml
# Read-only root filesystem in mind: bytecode is precompiled above, nothing writes outside
# /data (the local driver's file and the journal) and /tmp (mount an emptyDir there).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PRIORITY_PUBSUB_CONFIG=/etc/priority-pubsub/config.yaml
WORKDIR /data
VOLUME ["/data"]
USER ${UID}:${UID}
EXPOSE 9464
# slim has no curl: ask /healthz with the standard library. The port follows the
# PRIORITY_PUBSUB_SERVER__PORT override when one is set; server.host must not be loopback-only
# for Kubernetes probes (the image's config uses 0.0.0.0).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PRIORITY_PUBSUB_SERVER__PORT', '9464'), timeout=4)"]
ENTRYPOINT ["priority-pubsub", "run"]
