"""Python client of the scheduler platform: both APIs (schedules and runs, notifications).

    from schedulerclient import Client, ApiError

    with Client("http://127.0.0.1:8089", token) as client:
        schedule = client.create_schedule(name="nightly", cron="0 3 * * *", timezone="UTC",
                                          target={"url": "https://example.com/hook"})
        print(schedule.id, schedule.secret)          # the secret: shown on create only
        for run in client.iter_runs(schedule.id):
            print(run.status)

Depends on httpx and pydantic only. Models: `schedulerclient.models`. Errors: `ApiError` (the
API's problem document), `TransportError`, `PageLimitError`, all `SchedulerClientError`.
"""

from schedulerclient._unset import UNSET, Unset
from schedulerclient._version import __version__
from schedulerclient.client import AsyncClient, Client
from schedulerclient.errors import ApiError, PageLimitError, SchedulerClientError, TransportError

__all__ = [
    "UNSET",
    "ApiError",
    "AsyncClient",
    "Client",
    "PageLimitError",
    "SchedulerClientError",
    "TransportError",
    "Unset",
    "__version__",
]
