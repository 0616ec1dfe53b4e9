"""The throwaway PostgreSQL cluster started by the test session answers SQLAlchemy."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import sqlalchemy
from mahjong_infra import postgres as postgres_infra

pytestmark = pytest.mark.integration


def test_select_version_runs_on_the_real_server(postgres_database_url: str) -> None:
    engine = sqlalchemy.create_engine(postgres_database_url)
    try:
        with engine.connect() as connection:
            banner = connection.execute(sqlalchemy.text("select version()")).scalar_one()
    finally:
        engine.dispose()

    assert banner.startswith(f"PostgreSQL {postgres_infra.version()}")


def test_the_url_is_a_psycopg3_url_on_loopback(postgres_database_url: str) -> None:
    url = sqlalchemy.make_url(postgres_database_url)
    assert (url.drivername, url.host) == ("postgresql+psycopg", "127.0.0.1")


def test_each_test_gets_its_own_empty_database(
    postgres_database_url: str, postgres_database_factory: Callable[[str], str]
) -> None:
    other_url = postgres_database_factory("ledger")
    assert other_url != postgres_database_url
    for url in (postgres_database_url, other_url):
        engine = sqlalchemy.create_engine(url)
        try:
            with engine.begin() as connection:
                connection.execute(sqlalchemy.text("create table marker (id integer primary key)"))
                connection.execute(sqlalchemy.text("insert into marker values (1)"))
                assert connection.execute(sqlalchemy.text("select count(*) from marker")).scalar_one() == 1
        finally:
            engine.dispose()


def test_the_server_does_not_run_as_root(postgres_database_url: str) -> None:
    engine = sqlalchemy.create_engine(postgres_database_url)
    try:
        with engine.connect() as connection:
            data_directory = connection.execute(sqlalchemy.text("show data_directory")).scalar_one()
    finally:
        engine.dispose()
    # The data directory belongs to whoever runs the server; PostgreSQL itself refuses root.
    assert os.stat(data_directory).st_uid != 0


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        ("Test Something[param-1]", "test_something_param_1"),
        ("123abc", "db_123abc"),
        ("x" * 100, "x" * 63),
        ("!!!", "db"),
    ],
)
def test_database_names_are_made_valid(hint: str, expected: str) -> None:
    assert postgres_infra.database_name(hint) == expected


def test_a_cluster_starts_with_the_server_settings_it_is_given() -> None:
    with postgres_infra.PostgresCluster(server_settings={"autovacuum_naptime": "1s"}) as cluster:
        engine = sqlalchemy.create_engine(cluster.url())
        try:
            with engine.connect() as connection:
                naptime = connection.execute(sqlalchemy.text("show autovacuum_naptime")).scalar_one()
                fsync = connection.execute(sqlalchemy.text("show fsync")).scalar_one()
        finally:
            engine.dispose()
    assert (naptime, fsync) == ("1s", "off")  # the given setting, and the cluster's own kept


@pytest.mark.parametrize(
    "setting", [{"work_mem": "64MB -c fsync=on"}, {"search_path": "'x'"}, {"Bad Name": "1"}]
)
def test_a_server_setting_that_pg_ctl_would_split_or_quote_is_refused(setting: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="unsupported server setting"):
        postgres_infra.PostgresCluster(server_settings=setting)
