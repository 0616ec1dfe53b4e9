# One image for the four services. docker-compose.yml picks the service by command:
#   python -m mahjong_matchmaking | mahjong_table | mahjong_scoring | mahjong_ledger
# Configuration comes only from MAHJONG_* environment variables (libs/platform/mahjong_platform/config.py).

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore keeps the virtualenv, caches, data and the Kafka download out of the context.
COPY . .
# requirements-dev.txt pins every runtime dependency; used as constraints it pins them without
# installing the development tools. pip refuses extras in constraints, hence the sed.
RUN sed 's/\[[^]]*\]//' requirements-dev.txt > /tmp/constraints.txt \
    && python -m venv /opt/mahjong \
    && /opt/mahjong/bin/pip install --constraint /tmp/constraints.txt \
        ./libs/rules ./libs/protos ./libs/platform \
        $(find services -mindepth 2 -maxdepth 2 -name pyproject.toml -printf './%h\n' | sort)

FROM python:3.11-slim
COPY --from=build /opt/mahjong /opt/mahjong
ENV PATH=/opt/mahjong/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MAHJONG_DATA_DIR=/var/lib/mahjong \
    MAHJONG_LOG_FORMAT=json
RUN useradd --system --uid 10001 --create-home --home-dir /var/lib/mahjong mahjong
USER mahjong
WORKDIR /var/lib/mahjong
# No default service: compose (or `docker run IMAGE python -m mahjong_<service>`) names one.
CMD ["python", "-c", "raise SystemExit('choose a service: python -m mahjong_matchmaking | mahjong_table | mahjong_scoring | mahjong_ledger')"]
