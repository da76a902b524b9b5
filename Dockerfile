# CultureKAR API image (CPU torch; the VLM runs in its own vLLM container).
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 HF_HUB_OFFLINE=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgl1 libglib2.0-0 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# dependencies first (cached layer): CPU torch, then the project
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch>=2.3"
COPY pyproject.toml README.md ./
COPY culturebase culturebase
COPY crawlers crawlers
COPY retrieval retrieval
COPY agents agents
COPY eval eval
COPY services services
COPY scrapy.cfg ./
RUN pip install . && useradd --create-home --uid 10001 kar && mkdir -p /data && chown kar /data
USER kar
ENV KAR_DATA_DIR=/data KAR_KB_PATH=/data/culturebase KAR_API_HOST=0.0.0.0 KAR_API_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=3).status == 200 else 1)"
CMD ["kar", "serve"]
