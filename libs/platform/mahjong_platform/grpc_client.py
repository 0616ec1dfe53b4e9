"""Client side of the services: channels that send a bearer token, and a health probe.

gRPC's own ``access_token_call_credentials`` only travel over TLS channels. Inside a deployment and
in tests the services talk plaintext, so `open_channel` adds the ``authorization`` metadata with a
client interceptor instead; it works the same for unary and streaming calls.

Run as a program, this module is the health probe used by docker-compose::

    python -m mahjong_platform.grpc_client health 127.0.0.1:50054 mahjong.v1.LedgerService

It exits 0 when the service reports SERVING and 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mahjong_platform.auth import AUTHORIZATION_METADATA_KEY

TokenSource = str | Callable[[], str]
"""A fixed token, or a function returning the current one (for tokens refreshed before expiry)."""

DEFAULT_HEALTH_TIMEOUT_SECONDS: Final = 3.0


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying ``token``, for a single call: ``stub.Method(request, metadata=...)``."""
    assert token, "an empty token authenticates nobody"
    return ((AUTHORIZATION_METADATA_KEY, f"Bearer {token}"),)


class _ClientCallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, details: grpc.ClientCallDetails, metadata: Sequence[tuple[str, str]]) -> None:
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = details.wait_for_ready
        self.compression = details.compression


class BearerTokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds ``authorization: Bearer <token>`` to every call that does not carry its own."""

    def __init__(self, token: TokenSource) -> None:
        self._token = token

    def _with_token(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = list(details.metadata or ())
        if any(key == AUTHORIZATION_METADATA_KEY for key, _ in metadata):
            return details
        token = self._token() if callable(self._token) else self._token
        return _ClientCallDetails(details, [*metadata, *bearer_metadata(token)])

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        """Send a unary call with the token."""
        return continuation(self._with_token(client_call_details), request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        """Send a server-streaming call with the token."""
        return continuation(self._with_token(client_call_details), request)

    def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        """Send a client-streaming call with the token."""
        return continuation(self._with_token(client_call_details), request_iterator)

    def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        """Send a bidirectional call with the token."""
        return continuation(self._with_token(client_call_details), request_iterator)


def open_channel(target: str, token: TokenSource | None = None) -> grpc.Channel:
    """A plaintext channel to ``target`` (host:port) that sends ``token`` on every call when given.

    Close it when done (``with open_channel(...) as channel:``).
    """
    channel = grpc.insecure_channel(target)
    if token is None:
        return channel
    intercepted: grpc.Channel = grpc.intercept_channel(channel, BearerTokenInterceptor(token))
    return intercepted


def check_health(
    target: str, service_name: str = "", timeout_seconds: float = DEFAULT_HEALTH_TIMEOUT_SECONDS
) -> bool:
    """True when the server at ``target`` reports ``service_name`` ("" = the whole server) SERVING."""
    with grpc.insecure_channel(target) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service_name), timeout=timeout_seconds
            )
        except grpc.RpcError:
            return False
    serving: bool = response.status == health_pb2.HealthCheckResponse.SERVING
    return serving


def main(arguments: Sequence[str] | None = None) -> int:
    """Command line: ``health <target> [service]``; exit status 0 when SERVING."""
    parser = argparse.ArgumentParser(prog="python -m mahjong_platform.grpc_client")
    commands = parser.add_subparsers(dest="command", required=True)
    health_command = commands.add_parser("health", help="exit 0 when the service reports SERVING")
    health_command.add_argument("target", help="host:port of the gRPC server")
    health_command.add_argument("service", nargs="?", default="", help="full service name; empty = server")
    health_command.add_argument("--timeout-seconds", type=float, default=DEFAULT_HEALTH_TIMEOUT_SECONDS)
    parsed = parser.parse_args(arguments)
    serving = check_health(parsed.target, parsed.service, parsed.timeout_seconds)
    print("SERVING" if serving else "NOT SERVING", file=sys.stderr)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
