from tests.support.kafka import kafka_bootstrap, tansu_broker  # noqa: F401  (pytest fixtures)
