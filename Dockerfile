# The image the Helm chart runs: a Ray head with kai-ray (the scheduler actor, the
# Kubernetes operator). No image is built by the tests; `docker build -t kai-ray .`
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends bash && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/kai-ray
COPY pyproject.toml README.md ./
COPY kai_ray ./kai_ray
RUN pip install --no-cache-dir '.[ray,kubernetes]'
USER 1000
EXPOSE 8265 8080
CMD ["kai-ray", "operator"]
