# The bot's image: Slack surfaces, watcher and scheduler. No torch: training runs in SageMaker's
# Hugging Face containers, which receive training/ as their source_dir.
FROM python:3.11-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TRAINBOT_HOME=/var/lib/trainbot \
    TRAINBOT_BACKEND=sagemaker

WORKDIR /app

# Dependencies in their own layer: it only rebuilds when pyproject.toml changes.
COPY pyproject.toml ./
# Empty stand-ins for every package pyproject.toml lists (read from it, so a new package needs no edit here).
RUN python -c "import pathlib, tomllib; [pathlib.Path(p.replace('.', '/')).mkdir(parents=True, exist_ok=True) or pathlib.Path(p.replace('.', '/'), '__init__.py').touch() for p in tomllib.load(open('pyproject.toml', 'rb'))['tool']['setuptools']['packages']]" \
    && touch README.md \
    && pip install '.[postgres]' \
    && pip uninstall -y trainbot \
    && rm -rf bot handlers jobs training

COPY README.md ./
COPY bot ./bot
COPY handlers ./handlers
COPY jobs ./jobs
COPY training ./training
RUN pip install --no-deps . \
    && useradd --system --uid 10001 --home-dir /var/lib/trainbot --create-home trainbot

USER trainbot
EXPOSE 3000

# /healthz answers in both modes (Socket Mode serves it on --port too).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:3000/healthz', timeout=4).status == 200 else 1)"

ENTRYPOINT ["trainbot"]
CMD ["serve", "--port", "3000"]
