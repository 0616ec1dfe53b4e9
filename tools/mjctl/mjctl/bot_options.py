"""The bots' defaults that their command line needs too (`mjctl.bots_command`), in a module of their
own so that parsing ``mjctl bots``' options imports neither the bots nor gRPC."""

from __future__ import annotations

PLAY_HOLD_IDLE_UPDATES_MS = 250
"""The bots' `PlayOptions.hold_idle_updates_ms` (``mjctl bots --hold-idle-updates-ms``): a seat's
update that gives it nothing to decide waits up to this long for the next and goes out merged with
it, so a bot reads about two messages per command instead of four (its decisions still arrive at
once); the events it only watches arrive up to this much later."""
