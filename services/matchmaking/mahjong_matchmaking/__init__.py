"""Matchmaking service: the room catalog, tickets and seat assignment (ARCHITECTURE.md)."""
