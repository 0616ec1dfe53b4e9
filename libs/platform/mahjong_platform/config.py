"""Configuration of every service from environment variables, with defaults that run a fresh checkout.

Every setting has one environment variable named ``MAHJONG_<WHAT>``; docker-compose.yml uses the
same names (a test keeps the two in step through `KNOWN_VARIABLES`). The defaults need nothing but
Python: SQLite files under ``./data``, a Kafka broker on 127.0.0.1:9092 (started by ``infra/``), and
the four gRPC services on 127.0.0.1:50051..50054, their Prometheus metrics on 127.0.0.1:9151..9154.

`load_settings` reads the variables once, validates all of them and returns a frozen `Settings`.
A value that does not parse raises `ConfigurationError` naming the variable, so a typo in a deploy
fails at start with a message the operator can act on, not later in the middle of a game.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final, Literal, get_args

ServiceName = Literal["matchmaking", "table", "scoring", "ledger"]
LogFormat = Literal["json", "text"]
Environment = Literal["production", "development"]

SERVICE_NAMES: Final[tuple[ServiceName, ...]] = get_args(ServiceName)
LOG_FORMATS: Final[tuple[LogFormat, ...]] = get_args(LogFormat)
ENVIRONMENTS: Final[tuple[Environment, ...]] = get_args(Environment)
DEVELOPMENT: Final[Environment] = "development"
LOG_LEVELS: Final[tuple[str, ...]] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Deliberately named so that nobody mistakes it for a real secret when it shows up in a deploy.
DEVELOPMENT_JWT_SECRET: Final = "insecure-development-secret-do-not-use-in-production"
# HS256 with a key shorter than the hash output (32 bytes) is weaker than the algorithm promises.
MINIMUM_JWT_SECRET_BYTES: Final = 32

DEFAULT_DATA_DIRECTORY: Final = "./data"
DEFAULT_KAFKA_BOOTSTRAP_SERVERS: Final = "127.0.0.1:9092"
DEFAULT_TOPIC_PARTITIONS: Final = 6
MAXIMUM_TOPIC_PARTITIONS: Final = 1000
DEFAULT_GRPC_PORTS: Final[Mapping[ServiceName, int]] = MappingProxyType(
    {"matchmaking": 50051, "table": 50052, "scoring": 50053, "ledger": 50054}
)
# Prometheus scrapes each service's /metrics here; 9090-9100 are Prometheus's and node exporter's.
DEFAULT_METRICS_PORTS: Final[Mapping[ServiceName, int]] = MappingProxyType(
    {"matchmaking": 9151, "table": 9152, "scoring": 9153, "ledger": 9154}
)
# Every open stream (a player's Watch, a WatchTicket) holds a worker thread for its whole life: a
# table engine serving 64 players at 16 tables needs well over 64.
DEFAULT_GRPC_MAX_WORKERS: Final = 512
MAXIMUM_GRPC_MAX_WORKERS: Final = 4096
DEFAULT_GRPC_SHUTDOWN_GRACE_SECONDS: Final = 10.0
MAXIMUM_GRPC_SHUTDOWN_GRACE_SECONDS: Final = 300.0

# Per-caller limits (`mahjong_platform.limits`): one caller cannot hold every worker.
DEFAULT_GRPC_STREAMS_PER_CALLER: Final = 16
DEFAULT_GRPC_CALLS_PER_CALLER: Final = 32
DEFAULT_GRPC_STREAM_IDLE_SECONDS: Final = 600
MAXIMUM_GRPC_STREAM_IDLE_SECONDS: Final = 86_400

DEFAULT_RETENTION_HOURS: Final = 168
MAXIMUM_RETENTION_HOURS: Final = 87_600

DATA_DIRECTORY_VARIABLE: Final = "MAHJONG_DATA_DIR"
KAFKA_BOOTSTRAP_SERVERS_VARIABLE: Final = "MAHJONG_KAFKA_BOOTSTRAP_SERVERS"
TOPIC_PREFIX_VARIABLE: Final = "MAHJONG_TOPIC_PREFIX"
TOPIC_PARTITIONS_VARIABLE: Final = "MAHJONG_TOPIC_PARTITIONS"
JWT_SECRET_VARIABLE: Final = "MAHJONG_JWT_SECRET"
LOG_LEVEL_VARIABLE: Final = "MAHJONG_LOG_LEVEL"
LOG_FORMAT_VARIABLE: Final = "MAHJONG_LOG_FORMAT"
GRPC_MAX_WORKERS_VARIABLE: Final = "MAHJONG_GRPC_MAX_WORKERS"
GRPC_SHUTDOWN_GRACE_SECONDS_VARIABLE: Final = "MAHJONG_GRPC_SHUTDOWN_GRACE_SECONDS"
RETENTION_HOURS_VARIABLE: Final = "MAHJONG_RETENTION_HOURS"
ENVIRONMENT_VARIABLE: Final = "MAHJONG_ENV"
GRPC_STREAMS_PER_CALLER_VARIABLE: Final = "MAHJONG_GRPC_STREAMS_PER_CALLER"
GRPC_CALLS_PER_CALLER_VARIABLE: Final = "MAHJONG_GRPC_CALLS_PER_CALLER"
GRPC_STREAM_IDLE_SECONDS_VARIABLE: Final = "MAHJONG_GRPC_STREAM_IDLE_SECONDS"
TABLE_ADVERTISED_ADDRESS_VARIABLE: Final = "MAHJONG_TABLE_ADVERTISED_ADDRESS"


def database_url_variable(service: ServiceName) -> str:
    """Name of the variable holding ``service``'s SQLAlchemy database URL."""
    return f"MAHJONG_{service.upper()}_DATABASE_URL"


def grpc_address_variable(service: ServiceName) -> str:
    """Name of the variable holding the host:port ``service``'s gRPC server listens on."""
    return f"MAHJONG_{service.upper()}_GRPC_ADDRESS"


def grpc_target_variable(service: ServiceName) -> str:
    """Name of the variable holding the host:port clients dial to reach ``service``.

    Separate from the listen address because in a container a server listens on 0.0.0.0 while its
    callers dial the container's name (``ledger:50054``).
    """
    return f"MAHJONG_{service.upper()}_GRPC_TARGET"


def metrics_address_variable(service: ServiceName) -> str:
    """Name of the variable holding the host:port ``service``'s Prometheus ``/metrics`` listens on."""
    return f"MAHJONG_{service.upper()}_METRICS_ADDRESS"


KNOWN_VARIABLES: Final[frozenset[str]] = frozenset(
    {
        DATA_DIRECTORY_VARIABLE,
        KAFKA_BOOTSTRAP_SERVERS_VARIABLE,
        TOPIC_PREFIX_VARIABLE,
        TOPIC_PARTITIONS_VARIABLE,
        JWT_SECRET_VARIABLE,
        LOG_LEVEL_VARIABLE,
        LOG_FORMAT_VARIABLE,
        GRPC_MAX_WORKERS_VARIABLE,
        GRPC_SHUTDOWN_GRACE_SECONDS_VARIABLE,
        RETENTION_HOURS_VARIABLE,
        ENVIRONMENT_VARIABLE,
        GRPC_STREAMS_PER_CALLER_VARIABLE,
        GRPC_CALLS_PER_CALLER_VARIABLE,
        GRPC_STREAM_IDLE_SECONDS_VARIABLE,
        TABLE_ADVERTISED_ADDRESS_VARIABLE,
    }
    | {database_url_variable(service) for service in SERVICE_NAMES}
    | {grpc_address_variable(service) for service in SERVICE_NAMES}
    | {grpc_target_variable(service) for service in SERVICE_NAMES}
    | {metrics_address_variable(service) for service in SERVICE_NAMES}
)
"""Every environment variable `load_settings` reads; nothing else named MAHJONG_* means anything."""

_LOGGER = logging.getLogger(__name__)
_TOPIC_PREFIX_PATTERN = re.compile(r"[A-Za-z0-9._-]*")
_HOST_PORT_PATTERN = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(?P<port>[0-9]{1,5})")
_PASSWORD_IN_URL = re.compile(r"(://[^:/@]+:)[^@]*@")
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "[::]", "::"})
_POSTGRESQL_SCHEMES = ("postgresql://", "postgres://")
_POSTGRESQL_DRIVER_SCHEME = "postgresql+psycopg://"


class ConfigurationError(ValueError):
    """An environment variable holds a value the services cannot run with; the message names it."""


@dataclass(frozen=True, repr=False)
class Settings:
    """Everything a service process needs to know about its environment, validated once at start.

    Its representation leaves out the JWT secret and database passwords: it ends up in logs.
    """

    data_directory: Path
    database_urls: Mapping[ServiceName, str]
    kafka_bootstrap_servers: tuple[str, ...]
    topic_prefix: str
    topic_partitions: int
    jwt_secret: str
    jwt_secret_is_development_default: bool
    grpc_addresses: Mapping[ServiceName, str]
    grpc_targets: Mapping[ServiceName, str]
    grpc_max_workers: int
    grpc_shutdown_grace_seconds: float
    log_level: str
    log_format: LogFormat
    retention_hours: int = DEFAULT_RETENTION_HOURS
    """How long processed event ids and sent outbox rows are kept (0: forever); see `retention`."""
    environment: Environment = "production"
    """``MAHJONG_ENV``: only ``development`` lets a service start on the public JWT secret."""
    jwt_secret_was_set: bool = True
    """False when ``MAHJONG_JWT_SECRET`` was unset or empty (the development default stands in)."""
    grpc_streams_per_caller: int = DEFAULT_GRPC_STREAMS_PER_CALLER
    grpc_calls_per_caller: int = DEFAULT_GRPC_CALLS_PER_CALLER
    grpc_stream_idle_seconds: int = DEFAULT_GRPC_STREAM_IDLE_SECONDS
    """A stream that sent nothing for this long is cancelled (the client resumes)."""
    metrics_addresses: Mapping[ServiceName, str] = dataclasses.field(
        default_factory=lambda: MappingProxyType(
            {service: f"127.0.0.1:{port}" for service, port in DEFAULT_METRICS_PORTS.items()}
        )
    )
    """host:port each service serves its Prometheus metrics on (HTTP, path /metrics)."""
    table_advertised_address: str = ""
    """host:port where the other table-engine replicas reach this one (the owner directory names
    it); empty: the listen address, or this host's address when it listens on every interface."""

    def __repr__(self) -> str:
        fields = []
        for settings_field in dataclasses.fields(self):
            value = getattr(self, settings_field.name)
            if settings_field.name == "jwt_secret":
                value = "<redacted>"
            elif isinstance(value, Mapping):
                value = dict(value)
            if settings_field.name == "database_urls":
                value = {
                    service: _PASSWORD_IN_URL.sub(r"\1<redacted>@", url) for service, url in value.items()
                }
            fields.append(f"{settings_field.name}={value!r}")
        return f"Settings({', '.join(fields)})"

    def database_url(self, service: ServiceName) -> str:
        """SQLAlchemy URL of ``service``'s own database (services never share one)."""
        return self.database_urls[service]

    def grpc_address(self, service: ServiceName) -> str:
        """host:port ``service``'s gRPC server binds."""
        return self.grpc_addresses[service]

    def metrics_address(self, service: ServiceName) -> str:
        """host:port ``service``'s Prometheus ``/metrics`` endpoint binds."""
        return self.metrics_addresses[service]

    def grpc_target(self, service: ServiceName) -> str:
        """host:port a client dials to reach ``service``."""
        return self.grpc_targets[service]


def load_settings(environ: Mapping[str, str] = os.environ) -> Settings:
    """Read and validate every ``MAHJONG_*`` variable from ``environ``, falling back to the defaults.

    An empty value counts as unset, so ``MAHJONG_LOG_LEVEL=`` in a compose file means "default".
    Raises `ConfigurationError` naming the first variable whose value is invalid.
    """
    data_directory = _parse_data_directory(_read(environ, DATA_DIRECTORY_VARIABLE, DEFAULT_DATA_DIRECTORY))
    environment = _parse_environment(_read(environ, ENVIRONMENT_VARIABLE, "production"))
    jwt_secret = _read(environ, JWT_SECRET_VARIABLE, DEVELOPMENT_JWT_SECRET)
    jwt_secret_was_set = bool(environ.get(JWT_SECRET_VARIABLE, "").strip())
    _validate_jwt_secret(jwt_secret)
    jwt_secret_is_development_default = jwt_secret == DEVELOPMENT_JWT_SECRET
    if jwt_secret_is_development_default:
        _LOGGER.warning(
            "%s is not set: tokens are signed with the PUBLIC development secret, so anyone can mint "
            "a token for any player and any role. Set %s to a random value of at least %d bytes "
            "for anything but local development.",
            JWT_SECRET_VARIABLE,
            JWT_SECRET_VARIABLE,
            MINIMUM_JWT_SECRET_BYTES,
        )
    grpc_addresses = {
        service: _parse_host_port(
            grpc_address_variable(service),
            _read(environ, grpc_address_variable(service), f"127.0.0.1:{DEFAULT_GRPC_PORTS[service]}"),
        )
        for service in SERVICE_NAMES
    }
    metrics_addresses = {
        service: _parse_host_port(
            metrics_address_variable(service),
            _read(environ, metrics_address_variable(service), f"127.0.0.1:{DEFAULT_METRICS_PORTS[service]}"),
        )
        for service in SERVICE_NAMES
    }
    for service in SERVICE_NAMES:
        if metrics_addresses[service] == grpc_addresses[service] and not metrics_addresses[service].endswith(
            ":0"
        ):
            raise ConfigurationError(
                f"{metrics_address_variable(service)} and {grpc_address_variable(service)} must differ, "
                f"both are {metrics_addresses[service]!r}"
            )
    advertised = _read(environ, TABLE_ADVERTISED_ADDRESS_VARIABLE, "")
    if advertised:
        _parse_host_port(TABLE_ADVERTISED_ADDRESS_VARIABLE, advertised)
    return Settings(
        data_directory=data_directory,
        database_urls=MappingProxyType(
            {service: _database_url(environ, service, data_directory) for service in SERVICE_NAMES}
        ),
        kafka_bootstrap_servers=_parse_bootstrap_servers(
            _read(environ, KAFKA_BOOTSTRAP_SERVERS_VARIABLE, DEFAULT_KAFKA_BOOTSTRAP_SERVERS)
        ),
        topic_prefix=_parse_topic_prefix(_read(environ, TOPIC_PREFIX_VARIABLE, "")),
        topic_partitions=_parse_bounded_integer(
            environ, TOPIC_PARTITIONS_VARIABLE, DEFAULT_TOPIC_PARTITIONS, MAXIMUM_TOPIC_PARTITIONS
        ),
        jwt_secret=jwt_secret,
        jwt_secret_is_development_default=jwt_secret_is_development_default,
        grpc_addresses=MappingProxyType(grpc_addresses),
        grpc_targets=MappingProxyType(
            {
                service: _parse_host_port(
                    grpc_target_variable(service),
                    _read(environ, grpc_target_variable(service), _dialable(grpc_addresses[service])),
                )
                for service in SERVICE_NAMES
            }
        ),
        grpc_max_workers=_parse_bounded_integer(
            environ, GRPC_MAX_WORKERS_VARIABLE, DEFAULT_GRPC_MAX_WORKERS, MAXIMUM_GRPC_MAX_WORKERS
        ),
        grpc_shutdown_grace_seconds=_parse_grace_seconds(environ),
        log_level=_parse_log_level(_read(environ, LOG_LEVEL_VARIABLE, "INFO")),
        log_format=_parse_log_format(_read(environ, LOG_FORMAT_VARIABLE, "text")),
        retention_hours=_parse_retention_hours(environ),
        environment=environment,
        jwt_secret_was_set=jwt_secret_was_set,
        grpc_streams_per_caller=_parse_bounded_integer(
            environ,
            GRPC_STREAMS_PER_CALLER_VARIABLE,
            DEFAULT_GRPC_STREAMS_PER_CALLER,
            MAXIMUM_GRPC_MAX_WORKERS,
        ),
        grpc_calls_per_caller=_parse_bounded_integer(
            environ, GRPC_CALLS_PER_CALLER_VARIABLE, DEFAULT_GRPC_CALLS_PER_CALLER, MAXIMUM_GRPC_MAX_WORKERS
        ),
        grpc_stream_idle_seconds=_parse_bounded_integer(
            environ,
            GRPC_STREAM_IDLE_SECONDS_VARIABLE,
            DEFAULT_GRPC_STREAM_IDLE_SECONDS,
            MAXIMUM_GRPC_STREAM_IDLE_SECONDS,
        ),
        metrics_addresses=MappingProxyType(metrics_addresses),
        table_advertised_address=advertised,
    )


def check_secret_for_serving(settings: Settings) -> None:
    """Refuse to serve on a missing or public JWT secret unless ``MAHJONG_ENV=development``.

    A service that signs and checks tokens with the public development string lets anyone mint a
    ``finance`` token; production must set its own secret (at least 32 bytes, checked on load).
    Called by every service process before it serves; ``mjctl run`` and the tests set
    ``MAHJONG_ENV=development``.
    """
    if settings.environment == DEVELOPMENT:
        return
    if not settings.jwt_secret_was_set or settings.jwt_secret_is_development_default:
        raise ConfigurationError(
            f"{JWT_SECRET_VARIABLE} is unset or is the public development secret: set it to a random "
            f"value of at least {MINIMUM_JWT_SECRET_BYTES} bytes (for example `openssl rand -hex 32`), "
            f"or set {ENVIRONMENT_VARIABLE}=development on a developer's machine"
        )


def _parse_environment(value: str) -> Environment:
    for environment in ENVIRONMENTS:
        if value.lower() == environment:
            return environment
    raise ConfigurationError(
        f"{ENVIRONMENT_VARIABLE} must be one of {', '.join(ENVIRONMENTS)}, got {value!r}"
    )


def _read(environ: Mapping[str, str], variable: str, default: str) -> str:
    assert variable in KNOWN_VARIABLES, f"{variable} must be listed in KNOWN_VARIABLES"
    value = environ.get(variable, "").strip()
    return value if value else default


def _parse_data_directory(value: str) -> Path:
    # Resolved once at start so that a later change of working directory cannot move the databases.
    return Path(value).expanduser().resolve()


def _database_url(environ: Mapping[str, str], service: ServiceName, data_directory: Path) -> str:
    variable = database_url_variable(service)
    url = _read(environ, variable, f"sqlite:///{data_directory / f'{service}.sqlite3'}")
    if url.startswith(_POSTGRESQL_SCHEMES):
        # SQLAlchemy's bare postgresql:// means psycopg2, which is not installed; psycopg 3 is.
        return _POSTGRESQL_DRIVER_SCHEME + url.split("://", 1)[1]
    if url.startswith(("sqlite://", "postgresql+")):
        return url
    raise ConfigurationError(
        f"{variable} must be a SQLAlchemy URL starting with sqlite:// or postgresql://, got {url!r}"
    )


def _parse_host_port(variable: str, value: str) -> str:
    match = _HOST_PORT_PATTERN.fullmatch(value)
    if match is None or int(match["port"]) > 65535:
        raise ConfigurationError(f"{variable} must be host:port (port 0-65535), got {value!r}")
    return value


def _dialable(address: str) -> str:
    """The address a local client dials for a server listening on ``address``."""
    host, _, port = address.rpartition(":")
    return f"127.0.0.1:{port}" if host in _WILDCARD_HOSTS else address


def _parse_bootstrap_servers(value: str) -> tuple[str, ...]:
    servers = tuple(server.strip() for server in value.split(",") if server.strip())
    if not servers:
        raise ConfigurationError(f"{KAFKA_BOOTSTRAP_SERVERS_VARIABLE} must list at least one host:port")
    for server in servers:
        _parse_host_port(KAFKA_BOOTSTRAP_SERVERS_VARIABLE, server)
    return servers


def _parse_topic_prefix(value: str) -> str:
    if _TOPIC_PREFIX_PATTERN.fullmatch(value) is None or len(value) > 100:
        raise ConfigurationError(
            f"{TOPIC_PREFIX_VARIABLE} may hold only letters, digits, '.', '_' and '-' "
            f"(at most 100 characters), got {value!r}"
        )
    return value


def _parse_bounded_integer(environ: Mapping[str, str], variable: str, default: int, maximum: int) -> int:
    assert variable in KNOWN_VARIABLES, f"{variable} must be listed in KNOWN_VARIABLES"
    return integer_setting(environ, variable, default=default, minimum=1, maximum=maximum)


def integer_setting(
    environ: Mapping[str, str], variable: str, *, default: int, minimum: int, maximum: int
) -> int:
    """The integer from ``minimum`` to ``maximum`` that ``variable`` holds (``default`` when it is unset or
    blank); anything else raises `ConfigurationError` naming the variable and the range. The one parser
    of a bounded integer: the platform's variables and a service's own (the ledger's starting grant,
    the table's loop batch) read theirs through it."""
    assert minimum <= default <= maximum, (variable, default)
    text = environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if not minimum <= value <= maximum:
        raise ConfigurationError(f"{variable} must be an integer from {minimum} to {maximum}, got {text!r}")
    return value


def _parse_retention_hours(environ: Mapping[str, str]) -> int:
    text = _read(environ, RETENTION_HOURS_VARIABLE, str(DEFAULT_RETENTION_HOURS))
    message = (
        f"{RETENTION_HOURS_VARIABLE} must be a whole number of hours "
        f"from 0 (keep forever) to {MAXIMUM_RETENTION_HOURS}"
    )
    try:
        value = int(text)
    except ValueError:
        raise ConfigurationError(f"{message}, got {text!r}") from None
    if not 0 <= value <= MAXIMUM_RETENTION_HOURS:
        raise ConfigurationError(f"{message}, got {text!r}")
    return value


def _parse_grace_seconds(environ: Mapping[str, str]) -> float:
    variable = GRPC_SHUTDOWN_GRACE_SECONDS_VARIABLE
    text = _read(environ, variable, str(DEFAULT_GRPC_SHUTDOWN_GRACE_SECONDS))
    message = f"{variable} must be a number of seconds from 0 to {MAXIMUM_GRPC_SHUTDOWN_GRACE_SECONDS:g}"
    try:
        value = float(text)
    except ValueError:
        raise ConfigurationError(f"{message}, got {text!r}") from None
    # The comparison also rejects NaN.
    if not 0.0 <= value <= MAXIMUM_GRPC_SHUTDOWN_GRACE_SECONDS:
        raise ConfigurationError(f"{message}, got {text!r}")
    return value


def _validate_jwt_secret(secret: str) -> None:
    if len(secret.encode()) < MINIMUM_JWT_SECRET_BYTES:
        raise ConfigurationError(
            f"{JWT_SECRET_VARIABLE} must be at least {MINIMUM_JWT_SECRET_BYTES} bytes long "
            f"(HS256 keys shorter than the hash are weak), got {len(secret.encode())} bytes"
        )


def _parse_log_level(value: str) -> str:
    level = value.upper()
    if level not in LOG_LEVELS:
        raise ConfigurationError(
            f"{LOG_LEVEL_VARIABLE} must be one of {', '.join(LOG_LEVELS)}, got {value!r}"
        )
    return level


def _parse_log_format(value: str) -> LogFormat:
    for log_format in LOG_FORMATS:
        if value.lower() == log_format:
            return log_format
    raise ConfigurationError(f"{LOG_FORMAT_VARIABLE} must be one of {', '.join(LOG_FORMATS)}, got {value!r}")
