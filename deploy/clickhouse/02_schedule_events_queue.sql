-- The Kafka consumer: every message of `schedule-events` as one JSON string (the DESIGN §9
-- envelope, exactly what the scheduler's outbox relay published). Reading it whole keeps an
-- envelope with new fields readable; the materialised view picks the fields it needs.
-- kafka_handle_error_mode = 'stream': a message that is not JSON fills the virtual `_error`
-- column instead of stopping the consumer; the view skips it.
-- Set kafka_broker_list to the cluster's brokers (the Kafka Service the services use).
CREATE TABLE IF NOT EXISTS run_analytics.schedule_events_queue
(
    raw String
)
ENGINE = Kafka
SETTINGS
    kafka_broker_list = 'kafka:9092',
    kafka_topic_list = 'schedule-events',
    kafka_group_name = 'clickhouse-run-analytics',
    kafka_format = 'JSONAsString',
    kafka_num_consumers = 1,
    kafka_handle_error_mode = 'stream';
