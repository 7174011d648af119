-- Run analytics on ClickHouse (docs/operations.md "Run analytics (ClickHouse)"). Apply the
-- numbered files in order: clickhouse-client --multiquery < 01_database.sql, then 02..04.
CREATE DATABASE IF NOT EXISTS run_analytics;
