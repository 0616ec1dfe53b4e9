"""The scoring service: each game's settlement from the table's events, and the rules over gRPC."""
