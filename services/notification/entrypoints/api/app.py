"""The FastAPI application of the notification service."""

from __future__ import annotations

from fastapi import FastAPI

from authclient import TokenVerifier
from authclient.fastapi import install
from notification.bootstrap import Container
from notification.entrypoints.api import alert_contacts, notifications, subscriptions
from servicekit.health import health_router
from servicekit.problems import install_problem_handlers


def create_app(container: Container, verifier: TokenVerifier) -> FastAPI:
    app = FastAPI(
        title="notification",
        version="1",
        description="Webhook subscriptions, fan-out deliveries, email and in-app alerts.",
    )
    app.state.container = container
    install_problem_handlers(app)
    install(app, verifier)
    app.include_router(health_router(container.store.ping))
    app.include_router(subscriptions.router)
    app.include_router(alert_contacts.router)
    app.include_router(notifications.router)
    return app
