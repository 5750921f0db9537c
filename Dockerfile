# syntax=docker/dockerfile:1
# Toolroom's image: one image for every Toolroom service of docker-compose.yml (migrate, web,
# worker, beat). Production settings come from the environment at run time; nothing secret is
# baked in. Build: docker compose build (or: docker build -t toolroom:local .)
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a virtual environment with the runtime dependencies, the code, its static files ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
WORKDIR /src

# Dependencies get their own layer, rebuilt only when pyproject.toml changes. They are read from
# pyproject.toml itself so the image and `pip install .` never disagree.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && /opt/venv/bin/pip install -r /tmp/requirements.txt

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
RUN groupadd --system --gid 10001 toolroom \
    && useradd --system --uid 10001 --gid toolroom --home-dir /var/lib/toolroom \
        --shell /usr/sbin/nologin toolroom \
    && install -d -o toolroom -g toolroom -m 0750 /var/lib/toolroom

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
# NoDelayHTTPProtocol: TCP_NODELAY on every connection, also under --workers N or gunicorn, whose
# listeners leave Nagle on (a flat ~40 ms per small answer; registry/core/http_protocol.py).
CMD ["uvicorn", "registry.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--proxy-headers", \
     "--http", "registry.core.http_protocol:NoDelayHTTPProtocol"]
