"""Migrations match the schema on SQLite and PostgreSQL; start-up refuses a missing key outside
--dev and generates one (0600) in --dev."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Connection

from notification.adapters.db import create_engine
from notification.adapters.mailers import InvalidSmtpURL, SmtpMailer
from notification.adapters.migrate import upgrade
from notification.adapters.tables import metadata
from notification.bootstrap import bootstrap
from notification.config import NotificationSettings
from servicekit.settings import ConfigError


async def test_migrations_create_exactly_the_schema(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        await upgrade(engine)
        await upgrade(engine)  # idempotent

        def diff(conn: Connection) -> list[object]:
            ctx = MigrationContext.configure(conn, opts={"compare_type": False})
            return list(compare_metadata(ctx, metadata))

        async with engine.connect() as conn:
            assert await conn.run_sync(diff) == []
    finally:
        await engine.dispose()


def test_missing_secret_key_refused_without_dev(tmp_path: Path) -> None:
    settings = NotificationSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/n.db", var_dir=tmp_path / "var"
    )
    with pytest.raises(ConfigError, match="NOTIFICATION_SECRET_KEY is not set"):
        bootstrap(settings)


async def test_dev_generates_key_file_0600(tmp_path: Path) -> None:
    settings = NotificationSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/n.db", var_dir=tmp_path / "var", dev=True
    )
    container = bootstrap(settings)
    await container.aclose()
    key_file = tmp_path / "var" / "notification-secret.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # A second start reuses the key, so stored secrets stay decryptable.
    again = bootstrap(settings)
    token = again.subscriptions.box.encrypt("x")
    await again.aclose()
    third = bootstrap(settings)
    assert third.subscriptions.box.decrypt(token) == "x"
    await third.aclose()


def test_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFICATION_SMTP_URL", "smtps://u:p@mail.example.com")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true")
    monkeypatch.setenv("NOTIFICATION_EVENT_TOPICS", "schedule-events, platform-events")
    s = NotificationSettings()
    assert s.smtp_url is not None
    assert s.smtp_url.get_secret_value().startswith("smtps://")
    assert s.kafka_bootstrap_servers == "127.0.0.1:9092"
    assert s.webhook_allow_private_networks is True
    assert s.event_topic_list() == ["schedule-events", "platform-events"]
    assert s.mail_from == "scheduler-alerts@localhost"


def test_console_public_url_is_read_unprefixed_and_must_be_an_origin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert NotificationSettings().console_public_url is None
    monkeypatch.setenv("CONSOLE_PUBLIC_URL", "https://scheduler.example.com/")
    assert NotificationSettings().console_public_url == "https://scheduler.example.com"
    for bad in ("scheduler.example.com", "ftp://x", "https://x/#/schedules"):
        monkeypatch.setenv("CONSOLE_PUBLIC_URL", bad)
        with pytest.raises(ConfigError, match="CONSOLE_PUBLIC_URL"):
            NotificationSettings()


def test_smtp_url_parsing() -> None:
    implicit = SmtpMailer("smtps://alerts%40corp:p%3Ass@mail.example.com")
    assert (implicit.host, implicit.port, implicit.implicit_tls) == ("mail.example.com", 465, True)
    assert (implicit.username, implicit.password) == ("alerts@corp", "p:ss")
    plain = SmtpMailer("smtp://127.0.0.1:2525")
    assert (plain.port, plain.implicit_tls, plain.username) == (2525, False, None)
    with pytest.raises(InvalidSmtpURL):
        SmtpMailer("http://mail.example.com")


def test_cli_migrate_works_from_any_directory(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("notification")
    env = {**os.environ, "NOTIFICATION_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/cli.db"}
    proc = subprocess.run(
        [str(exe), "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(tmp_path / "cli.db") as conn:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    assert {"subscriptions", "webhook_deliveries", "notifications"} <= tables


def test_cli_serve_refuses_without_key(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("notification")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTIFICATION_", "AUTH_"))}
    proc = subprocess.run(
        [str(exe), "serve", "--port", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "notification: NOTIFICATION_SECRET_KEY is not set (32 random bytes, URL-safe base64); "
        "use --dev to generate one under ./var"
    ]


def test_cli_serve_refuses_a_bad_setting_in_one_line(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("notification")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTIFICATION_", "AUTH_"))}
    env["NOTIFICATION_MAX_REQUEST_BYTES"] = "-5"
    proc = subprocess.run(
        [str(exe), "serve", "--port", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("notification: invalid setting NOTIFICATION_MAX_REQUEST_BYTES")
    assert "-5" not in line  # the value is never echoed
