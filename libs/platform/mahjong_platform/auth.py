"""Who is calling: bearer JWTs (HS256, shared secret), per-method roles, and the caller's identity.

Players and tools call with ``authorization: Bearer <JWT>``. The token is signed with HS256 and the
secret from configuration (``MAHJONG_JWT_SECRET``) and carries these claims:

- ``sub`` (required): the player id, 1-64 characters of letters, digits and ``._@-`` starting with a
  letter or digit (`PLAYER_ID_PATTERN`, the ledger's account naming);
- ``roles`` (required): a list of role names, possibly empty (``ops``, ``finance``);
- ``iat`` and ``exp`` (required): issued-at and expiry, seconds since the epoch; a token may live
  at most `MAXIMUM_TOKEN_TTL_SECONDS` (30 days) from ``iat`` to ``exp``, and ``iat`` may not lie in
  the future (beyond the clock leeway);
- ``member`` (optional, default false): the player belongs to the Happy Points loyalty program
  (欢乐积分计划), which members-only rooms require (RULES.md 3).

`AuthInterceptor` checks every call except the standard health and reflection services (deny by
default):

- no token, a header that is not ``Bearer <token>``, a token that is not a JWT, a bad signature, an
  expired or over-long-lived token, a missing or malformed claim → UNAUTHENTICATED, with a message
  saying which (a bad ``sub`` is a permanent error: the client must get another token);
- a method that is not in the service's role table, or whose roles the caller has none of →
  PERMISSION_DENIED. `ANY_CALLER` in a method's roles admits every verified caller; the handler
  then applies the per-seat and per-account rules.

The handler then reads the verified caller with `current_identity`. Seat- and table-level checks
("a player may act only for their own seat") belong to the services, which know the tables.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import grpc
import jwt

from mahjong_platform.errors import PermissionDeniedError, UnauthenticatedError
from mahjong_platform.grpc_server import WrappingInterceptor, wrap_rpc_method_handler

ROLE_OPS: Final = "ops"
ROLE_FINANCE: Final = "finance"
OPERATIONS_ROLES: Final = frozenset({ROLE_OPS, ROLE_FINANCE})
"""Either role may call operations such as Deposit and Reconcile (ARCHITECTURE.md)."""

ANY_CALLER: Final = "*"
"""In a role table: every verified caller may call the method (the handler checks seats, accounts)."""
EVERY_CALLER: Final = frozenset({ANY_CALLER})
OPS_ONLY: Final = frozenset({ROLE_OPS})

JWT_ALGORITHM: Final = "HS256"
REQUIRED_CLAIMS: Final = ("sub", "roles", "iat", "exp")
MEMBER_CLAIM: Final = "member"
PLAYER_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
AUTHORIZATION_METADATA_KEY: Final = "authorization"
DEFAULT_TOKEN_TTL_SECONDS: Final = 3600
MAXIMUM_TOKEN_TTL_SECONDS: Final = 30 * 24 * 3600
# Tolerated clock difference between the machine that minted a token and the one checking it.
DEFAULT_LEEWAY_SECONDS: Final = 30
# A header longer than this is not one of our tokens; refuse it before parsing.
MAXIMUM_TOKEN_BYTES: Final = 8192
MAXIMUM_ROLES: Final = 32


@dataclass(frozen=True)
class Identity:
    """A verified caller: the player id from ``sub``, the roles from ``roles``, and whether the
    player is a member of the Happy Points program (``member``)."""

    player_id: str
    roles: frozenset[str]
    member: bool = False

    def has_any_role(self, roles: Iterable[str]) -> bool:
        """True when the caller holds at least one of ``roles``."""
        return not self.roles.isdisjoint(roles)


_CURRENT_IDENTITY: contextvars.ContextVar[Identity | None] = contextvars.ContextVar(
    "mahjong_current_identity", default=None
)


def current_identity() -> Identity:
    """The verified caller of the RPC being handled.

    Raises `UnauthenticatedError` outside an authenticated call (a public method, or a server set up
    without `AuthInterceptor`), so a handler can never act on behalf of nobody by mistake.
    """
    identity = _CURRENT_IDENTITY.get()
    if identity is None:
        raise UnauthenticatedError("this call carries no verified identity")
    return identity


@contextlib.contextmanager
def identity_scope(identity: Identity) -> Iterator[Identity]:
    """Make ``identity`` the `current_identity` inside the block: for tests and in-process calls."""
    token = _CURRENT_IDENTITY.set(identity)
    try:
        yield identity
    finally:
        _CURRENT_IDENTITY.reset(token)


def enter_identity_scope(identity: Identity) -> contextvars.Token[Identity | None]:
    """Make ``identity`` the `current_identity` until `leave_identity_scope` (the asyncio server's
    auth layer, which enters before the handler and leaves after it)."""
    return _CURRENT_IDENTITY.set(identity)


def leave_identity_scope(token: contextvars.Token[Identity | None]) -> None:
    """End the scope `enter_identity_scope` began (a no-op when called from another context, as
    when a finished stream is closed by the loop's shutdown: that context ends with it)."""
    with contextlib.suppress(ValueError):
        _CURRENT_IDENTITY.reset(token)


def mint_token(
    secret: str,
    player_id: str,
    roles: Iterable[str] = (),
    ttl_seconds: int = DEFAULT_TOKEN_TTL_SECONDS,
    issued_at_epoch_seconds: int | None = None,
    *,
    member: bool = False,
) -> str:
    """Sign an HS256 token for ``player_id`` with ``roles``, valid for ``ttl_seconds``.

    For development, tests and ``mjctl token``; production tokens come from the mobile backend, which
    signs the same claims with the same secret. ``issued_at_epoch_seconds`` (default: now) lets a test
    mint a token that is already expired. ``member``: the player is in the Happy Points program.
    """
    assert player_id, "a token needs a player id"
    assert ttl_seconds <= MAXIMUM_TOKEN_TTL_SECONDS, f"ttl_seconds above {MAXIMUM_TOKEN_TTL_SECONDS}"
    issued_at = int(time.time()) if issued_at_epoch_seconds is None else issued_at_epoch_seconds
    claims = {
        "sub": player_id,
        "roles": sorted(set(roles)),
        "iat": issued_at,
        "exp": issued_at + ttl_seconds,
    }
    if member:
        claims[MEMBER_CLAIM] = True
    return jwt.encode(claims, secret, algorithm=JWT_ALGORITHM)


def verify_token(secret: str, token: str, leeway_seconds: int = DEFAULT_LEEWAY_SECONDS) -> Identity:
    """Check ``token``'s signature, expiry and claims; return who it names.

    Raises `UnauthenticatedError` with a message that says what is wrong with the token (never why
    in cryptographic detail, and never the token itself).
    """
    return _verified(secret, token, leeway_seconds)[0]


def _verified(secret: str, token: str, leeway_seconds: int) -> tuple[Identity, int]:
    """`verify_token`'s identity and the token's ``exp``."""
    if len(token) > MAXIMUM_TOKEN_BYTES:
        raise UnauthenticatedError(f"bearer token is longer than {MAXIMUM_TOKEN_BYTES} bytes")
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[JWT_ALGORITHM],
            options={"require": list(REQUIRED_CLAIMS)},
            leeway=leeway_seconds,
        )
    except jwt.ExpiredSignatureError:
        raise UnauthenticatedError("bearer token has expired; get a new token") from None
    except jwt.InvalidSignatureError:
        raise UnauthenticatedError("bearer token signature does not verify") from None
    except jwt.MissingRequiredClaimError as error:
        raise UnauthenticatedError(f"bearer token lacks the required claim {error.claim!r}") from None
    except jwt.InvalidAlgorithmError:
        raise UnauthenticatedError(f"bearer token must be signed with {JWT_ALGORITHM}") from None
    except jwt.DecodeError:
        raise UnauthenticatedError("bearer token is not a well-formed JWT") from None
    except jwt.InvalidTokenError as error:
        raise UnauthenticatedError(f"bearer token is invalid: {error}") from None
    _check_lifetime(claims, leeway_seconds)
    return _identity_from_claims(claims), int(claims["exp"])


VERIFIED_TOKENS_MAX: Final = 10_000


class VerifiedTokens:
    """Tokens that verified, with who they name, so a caller's every call does not check its
    signature and claims again (issue 10: a player's ~85 Acts per game carry the same token).

    Keyed by the secret, the leeway and the token string (an entry answers only the exact token,
    checked with the same secret); a hit is used only before the token's ``exp`` (never in the
    leeway after it: then the token is verified again, and refused once past the leeway). At most
    ``capacity`` entries (the oldest go first). Only successes are kept: a bad token is checked,
    and refused with its message, every time."""

    def __init__(self, capacity: int = VERIFIED_TOKENS_MAX, clock: Callable[[], float] = time.time) -> None:
        # Oldest first: `popitem(last=False)` drops it in O(1), where `del d[next(iter(d))]` on a
        # plain dict scans past every slot deleted since its last resize, at every eviction.
        self._entries: collections.OrderedDict[tuple[str, int, str], tuple[Identity, int]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        self._capacity = capacity
        self._clock = clock

    def verify(self, secret: str, token: str, leeway_seconds: int = DEFAULT_LEEWAY_SECONDS) -> Identity:
        """`verify_token`, answered from the cache while the token has not expired."""
        key = (secret, leeway_seconds, token)
        entry = self._entries.get(key)
        if entry is not None:
            if self._clock() < entry[1]:
                return entry[0]
            with self._lock:
                self._entries.pop(key, None)
        identity, expires_at = _verified(secret, token, leeway_seconds)
        if self._clock() < expires_at:
            with self._lock:
                while len(self._entries) >= self._capacity:
                    self._entries.popitem(last=False)
                self._entries[key] = (identity, expires_at)
        return identity

    def __len__(self) -> int:
        return len(self._entries)


def _check_lifetime(claims: Mapping[str, Any], leeway_seconds: int) -> None:
    """A token lives at most MAXIMUM_TOKEN_TTL_SECONDS and is not issued in the future."""
    issued_at, expires_at = claims["iat"], claims["exp"]
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (issued_at, expires_at)):
        raise UnauthenticatedError("bearer token claims 'iat' and 'exp' must be whole seconds")
    if issued_at > time.time() + leeway_seconds:
        raise UnauthenticatedError("bearer token claim 'iat' lies in the future; check the issuer's clock")
    if expires_at - issued_at > MAXIMUM_TOKEN_TTL_SECONDS:
        raise UnauthenticatedError(
            f"bearer token lives longer than {MAXIMUM_TOKEN_TTL_SECONDS} seconds from 'iat' to 'exp'; "
            "get a token with a shorter lifetime"
        )


def _identity_from_claims(claims: Mapping[str, Any]) -> Identity:
    player_id = claims["sub"]
    roles = claims["roles"]
    member = claims.get(MEMBER_CLAIM, False)
    if not isinstance(player_id, str) or PLAYER_ID_PATTERN.fullmatch(player_id) is None:
        raise UnauthenticatedError(
            "bearer token claim 'sub' must be a player id: 1-64 letters, digits or '._@-', "
            "starting with a letter or digit"
        )
    if not isinstance(member, bool):
        raise UnauthenticatedError(f"bearer token claim {MEMBER_CLAIM!r} must be true or false")
    if (
        not isinstance(roles, list)
        or len(roles) > MAXIMUM_ROLES
        or not all(isinstance(role, str) and role for role in roles)
    ):
        raise UnauthenticatedError(
            f"bearer token claim 'roles' must be a list of at most {MAXIMUM_ROLES} role names"
        )
    return Identity(player_id=player_id, roles=frozenset(roles), member=member)


def bearer_token_from_metadata(metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
    """The token of the single ``authorization: Bearer <token>`` entry in ``metadata``.

    Raises `UnauthenticatedError` when the entry is missing, repeated or not of that form.
    """
    values = [value for key, value in (metadata or ()) if key.lower() == AUTHORIZATION_METADATA_KEY]
    if not values:
        raise UnauthenticatedError("missing 'authorization' metadata; send 'authorization: Bearer <token>'")
    if len(values) > 1:
        raise UnauthenticatedError("send exactly one 'authorization' metadata entry")
    value = values[0]
    if isinstance(value, bytes):
        raise UnauthenticatedError("'authorization' metadata must be text: 'Bearer <token>'")
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise UnauthenticatedError("malformed 'authorization' metadata; expected 'Bearer <token>'")
    return token


def check_roles(method: str, identity: Identity, required_roles: Collection[str]) -> None:
    """Raise `PermissionDeniedError` unless ``identity`` holds one of ``required_roles``.

    `ANY_CALLER` among ``required_roles`` admits everyone; an empty collection admits nobody (deny
    by default: a method must be listed with the roles that may call it).
    """
    if ANY_CALLER in required_roles:
        return
    if not required_roles:
        raise PermissionDeniedError(f"{method} is not open to any caller (not in the service's role table)")
    if not identity.has_any_role(required_roles):
        held = ", ".join(sorted(identity.roles)) or "none"
        raise PermissionDeniedError(
            f"{method} needs one of the roles {', '.join(sorted(required_roles))}; "
            f"player {identity.player_id!r} has roles: {held}"
        )


RoleTable = Mapping[str, frozenset[str]]
"""Full method name (``/mahjong.v1.LedgerService/Deposit``) → the roles that may call it."""


def role_table(service_descriptor: Any, roles_by_method: Mapping[str, Collection[str]]) -> RoleTable:
    """The role table of one service, keyed by full method name, from its short method names.

    Every method of ``service_descriptor`` (a protobuf ServiceDescriptor) must be listed and no
    other name may be: a new rpc added to the proto without a decision about who may call it stops
    the service from starting (deny by default, ARCHITECTURE.md "Information hiding").
    """
    methods = {method.name for method in service_descriptor.methods}
    missing = methods - set(roles_by_method)
    unknown = set(roles_by_method) - methods
    assert not missing, f"{service_descriptor.full_name}: methods without roles: {sorted(missing)}"
    assert not unknown, f"{service_descriptor.full_name}: roles for unknown methods: {sorted(unknown)}"
    for name, roles in roles_by_method.items():
        assert roles, f"{service_descriptor.full_name}/{name}: an empty role set admits nobody; omit it"
    return {
        f"/{service_descriptor.full_name}/{name}": frozenset(roles) for name, roles in roles_by_method.items()
    }


VERIFIED_TOKENS: Final = VerifiedTokens()
"""The process's cache of verified tokens (`authorize`)."""


def authorize(
    method: str,
    metadata: Sequence[tuple[str, str | bytes]] | None,
    secret: str,
    method_roles: RoleTable,
    leeway_seconds: int = DEFAULT_LEEWAY_SECONDS,
    verified_tokens: VerifiedTokens | None = None,
) -> Identity:
    """Who calls ``method`` with ``metadata``, if they may: the check every server harness runs.

    Raises `UnauthenticatedError` (no or bad token) or `PermissionDeniedError` (a method missing from
    ``method_roles``, or a caller without one of its roles). Shared by the thread-pool and asyncio
    interceptors so both enforce the same rules. A token verified before is answered from
    ``verified_tokens`` (default: the process's `VERIFIED_TOKENS`) until its ``exp``.
    """
    token = bearer_token_from_metadata(metadata)
    identity = (verified_tokens or VERIFIED_TOKENS).verify(secret, token, leeway_seconds)
    check_roles(method, identity, method_roles.get(method, frozenset()))
    return identity


class AuthInterceptor(WrappingInterceptor):
    """Server interceptor that authenticates every call and enforces per-method roles.

    ``method_roles`` maps a full method name (``/mahjong.v1.LedgerService/Deposit``) to the roles of
    which the caller needs at least one (`ANY_CALLER`: a valid token suffices); a method not listed
    is refused with PERMISSION_DENIED (build the table with `role_table`). The standard
    health and reflection services are public (load balancers and grpcurl call them without tokens);
    ``public_methods`` adds more full method names. Works for unary and streaming methods.
    """

    def __init__(
        self,
        secret: str,
        method_roles: Mapping[str, Collection[str]] | None = None,
        public_methods: Collection[str] = (),
        leeway_seconds: int = DEFAULT_LEEWAY_SECONDS,
    ) -> None:
        assert secret, "the JWT secret must not be empty"
        self._secret = secret
        self._method_roles = {method: frozenset(roles) for method, roles in (method_roles or {}).items()}
        for method in self._method_roles:
            assert method.startswith("/") and method.count("/") == 2, f"not a full method name: {method}"
        self._public_methods = frozenset(public_methods)
        self._leeway_seconds = leeway_seconds

    def _passes_through(self, method: str) -> bool:
        return super()._passes_through(method) or method in self._public_methods

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """Wrap the method's handler so that it runs only for a verified, authorized caller."""

        def authorized_context(context: grpc.ServicerContext) -> contextvars.Context:
            # Verification runs in the worker thread, where context.abort() is allowed.
            try:
                identity = authorize(
                    method,
                    context.invocation_metadata(),
                    self._secret,
                    self._method_roles,
                    self._leeway_seconds,
                )
            except (UnauthenticatedError, PermissionDeniedError) as error:
                context.abort(error.status_code, error.message)
                raise AssertionError("context.abort returned") from error
            call_context = contextvars.copy_context()
            call_context.run(_CURRENT_IDENTITY.set, identity)
            return call_context

        def unary_response(invoke: Callable[[], Any], context: grpc.ServicerContext) -> Any:
            return authorized_context(context).run(invoke)

        def streaming_response(
            invoke: Callable[[], Iterator[Any]], context: grpc.ServicerContext
        ) -> Iterator[Any]:
            # Each step of the handler's generator runs inside the call's context, so the identity
            # is visible to the handler's code however the server schedules the iteration.
            call_context = authorized_context(context)
            iterator = call_context.run(invoke)
            try:
                while True:
                    try:
                        item = call_context.run(next, iterator)
                    except StopIteration:
                        return
                    yield item
            finally:
                close = getattr(iterator, "close", None)
                if close is not None:
                    call_context.run(close)

        return wrap_rpc_method_handler(handler, unary_response, streaming_response)
