"""The pure Sichuan Bloody table aggregate: commands -> `decide` -> events -> `evolve` -> state.

No I/O, no clock, no implicit randomness: the seed (or the wall) and every deadline expiry are
inputs. See `events` for the event catalogue (mirroring table_events.proto) and `views` for what
each seat may see and do.
"""
