# Toolroom's image: one image for every Toolroom service of docker-compose.yml (migrate, web,
# gateway, worker, discovery, runtime, beat). Production settings come from the environment at
# run time; nothing secret is baked in.
#
# The Python base is a build argument: the public python:3.11-slim-bookworm by default, or the
# local Debian one `make images` builds with no registry (scripts/stack_images.py, which also
# builds this image on it). Build: docker compose build, or docker build -t toolroom:local .
# No `# syntax=` line: BuildKit would fetch its Dockerfile frontend from a registry.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a virtual environment with the runtime dependencies, the code, its static files ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src

# Dependencies get their own layer, rebuilt only when pyproject.toml (or the wheels) change. They
# are read from pyproject.toml itself so the image and `pip install .` never disagree. Where the
# build has no network, `make images` first puts wheels for them (and pip's own) in deploy/wheels/
# on the host and they are installed from there, offline; with that folder empty they come from
# PyPI through the base image's pip.
COPY pyproject.toml ./
COPY deploy/wheels/ /wheels/
RUN python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && if ls /wheels/*.whl >/dev/null 2>&1; then \
        python3 -m venv --without-pip /opt/venv \
        && pip_wheel="$(ls /wheels/_pip/pip-*.whl)" \
        && /opt/venv/bin/python "$pip_wheel/pip" install --no-index --find-links /wheels \
            -r /tmp/requirements.txt; \
    else \
        python3 -m venv /opt/venv && /opt/venv/bin/pip install -r /tmp/requirements.txt; \
    fi

COPY manage.py ./
COPY registry ./registry
COPY workers ./workers
COPY templates ./templates

# Static files with the production storage (hashed, compressed names; whitenoise serves them).
# The production profile needs its three values to load; these placeholders exist only during
# this RUN and are not kept in the image.
RUN TOOLROOM_PROFILE=production \
    SECRET_KEY=collectstatic-placeholder \
    TOOLROOM_SECRETS_KEY=collectstatic-placeholder \
    ALLOWED_HOSTS=build.invalid \
    TOOLROOM_DATA_DIR=/tmp/toolroom \
    STATIC_ROOT=/src/staticfiles \
    /opt/venv/bin/python manage.py collectstatic --no-input --verbosity 0 \
    && /opt/venv/bin/python -m compileall -q manage.py registry workers \
    && rm -rf /tmp/toolroom

# --- runtime: the slim base, the venv and the code, run as an unprivileged user ----------------
FROM ${PYTHON_IMAGE} AS runtime
# /var/lib/toolroom/gateway-journal: the gateway's call journal, a volume in docker-compose.yml
# (a new volume takes this folder's owner).
RUN groupadd --system --gid 10001 toolroom \
    && useradd --system --uid 10001 --gid toolroom --home-dir /var/lib/toolroom \
        --shell /usr/sbin/nologin toolroom \
    && install -d -o toolroom -g toolroom -m 0750 /var/lib/toolroom \
    && install -d -o toolroom -g toolroom -m 0700 /var/lib/toolroom/gateway-journal

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=registry.settings \
    TOOLROOM_PROFILE=production \
    TOOLROOM_DATA_DIR=/var/lib/toolroom \
    STATIC_ROOT=/app/staticfiles

COPY --from=build /opt/venv /opt/venv
COPY --from=build /src/manage.py /app/manage.py
COPY --from=build /src/registry /app/registry
COPY --from=build /src/workers /app/workers
COPY --from=build /src/templates /app/templates
COPY --from=build /src/staticfiles /app/staticfiles

WORKDIR /app
USER toolroom:toolroom
EXPOSE 8000
# --no-proxy-headers: the client address is the socket's, or what TOOLROOM_TRUSTED_PROXY_HOPS
# proxies reported (registry/core/client_address.py), never an X-Forwarded-For a client wrote.
# NoDelayHTTPProtocol: TCP_NODELAY on every connection, also under --workers N or gunicorn, whose
# listeners leave Nagle on (a flat ~40 ms per small answer; registry/core/http_protocol.py).
CMD ["uvicorn", "registry.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--no-proxy-headers", \
     "--http", "registry.core.http_protocol:NoDelayHTTPProtocol"]
