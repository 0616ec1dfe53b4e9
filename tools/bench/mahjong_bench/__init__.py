"""Cross-service benchmarks (``make bench``): entry points that measure services' internal paths.

Like the cross-service tests in ``tests/``, a benchmark may import any service's internals (it
measures them in-process, without Kafka or gRPC); nothing imports it (``pyproject.toml``'s
``nothing-imports-the-benchmarks`` contract). Ops tools reach services through their APIs instead
(``mjctl``).
"""
