# The bot's image: Slack surfaces, watcher and scheduler. No torch: training runs in SageMaker's Hugging Face
# containers, which receive training/ as their source_dir.
#
# Installed exactly as CI installs what it tests: tools/install.sh from locks/bot.txt (the bot and its
# postgres extra, hashed), the package as a wheel built with the locked setuptools. tests/packaging runs that
# script into a clean venv and starts the installed `trainbot` (--help, plan, db upgrade, serve --http with
# /healthz and a signed /train), so a green CI is this image's install.
FROM python:3.11.7-slim-bookworm

# git: own code from `code=git+...` is cloned and checked out by the bot itself; openssh-client for
# git+ssh:// sources; ca-certificates for https ones. Nothing else from the distribution.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/trainbot/bin:$PATH \
    TRAINBOT_HOME=/var/lib/trainbot \
    TRAINBOT_BACKEND=sagemaker

WORKDIR /src

# The locked dependencies in their own layer: it rebuilds only when the lock (or the script) changes.
COPY tools/install.sh tools/
COPY locks/bot.txt locks/
RUN tools/install.sh /opt/trainbot locks/bot.txt

# The package: the wheel of this tree (discovered packages and data files), installed non-editable.
COPY . .
RUN tools/install.sh /opt/trainbot locks/bot.txt . \
    && cd / && rm -rf /src \
    && useradd --system --uid 10001 --home-dir /var/lib/trainbot --create-home trainbot

WORKDIR /var/lib/trainbot
USER trainbot
EXPOSE 3000

# The same /healthz CI asks the installed bot for; it answers in both modes (Socket Mode serves it on --port).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:3000/healthz', timeout=4).status == 200 else 1)"

ENTRYPOINT ["trainbot"]
CMD ["serve", "--port", "3000"]
