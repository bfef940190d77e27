# The memoryhub site: gunicorn (web), celery worker and beat share this image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY memoryhub ./memoryhub
COPY tenants ./tenants
RUN pip install --no-cache-dir '.[server]'
COPY manage.py ./
COPY config ./config
COPY templates ./templates

# /var/lib/memoryhub/media: the files the site keeps (org archives), a volume shared by
# web and workers in docker-compose.yml; made here so the volume is the app user's.
RUN useradd --create-home --uid 1000 memoryhub \
    && mkdir -p /var/lib/memoryhub/media && chown memoryhub /var/lib/memoryhub/media \
    && DEBUG=0 SECRET_KEY=collectstatic-only DATABASE_URL=postgres://x@localhost/x \
       python manage.py collectstatic --noinput
USER memoryhub

EXPOSE 8000
CMD ["gunicorn", "config.wsgi:application", "--config", "python:config.gunicorn", "--bind", "0.0.0.0:8000", "--workers", "3", "--preload"]
