from tests.scheduler.schedules.conftest import app, client, container

__all__ = ["app", "client", "container"]
