"""/v1/subscriptions/: endpoints, their secrets, and their delivery log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from authclient import Principal
from authclient.fastapi import require
from notification.bootstrap import Container
from notification.domain.subscriptions import InvalidEventTypeFilter
from notification.entrypoints.api.deps import (
    BODY_ERRORS,
    LIST_ERRORS,
    ROUTE_ERRORS,
    IdPath,
    Limit,
    container,
    cursor_param,
)
from notification.entrypoints.api.schemas import (
    DeliveryOut,
    Page,
    SubscriptionIn,
    SubscriptionOut,
    SubscriptionPatch,
    SubscriptionWithSecretOut,
)
from notification.service_layer.ports import (
    DuplicateSubscription,
    SubscriptionLimitReached,
    SubscriptionRecord,
)
from notification.service_layer.subscriptions import SubscriptionNotFound
from servicekit.data.pagination import LIMIT_DEFAULT, Cursor, split_page
from servicekit.http.problems import (
    ProblemError,
    field_errors_problem,
    not_found,
    problem_responses,
)
from webhookdeliver import InvalidTargetURL

router = APIRouter(prefix="/v1/subscriptions", tags=["subscriptions"], responses=ROUTE_ERRORS)
# A subscription's deliveries are a resource of their own in OpenAPI (one tag per operation).
deliveries_router = APIRouter(
    prefix="/v1/subscriptions", tags=["deliveries"], responses=ROUTE_ERRORS
)

Read = Annotated[Principal, require("notifications:read")]
Write = Annotated[Principal, require("notifications:write")]
Box = Annotated[Container, Depends(container)]
After = Annotated[Cursor | None, Depends(cursor_param)]


def _invalid(field: str, detail: str) -> ProblemError:
    return field_errors_problem([(field, detail)])


def _with_secret(sub: SubscriptionRecord, secret: str) -> SubscriptionWithSecretOut:
    return SubscriptionWithSecretOut(**dict(SubscriptionOut.of(sub)), secret=secret)


@router.post(
    "/",
    operation_id="createSubscription",
    status_code=201,
    response_model=SubscriptionWithSecretOut,
    responses={**BODY_ERRORS, **problem_responses(409)},
)
async def create_subscription(
    body: SubscriptionIn, principal: Write, c: Box
) -> SubscriptionWithSecretOut:
    try:
        created = await c.subscriptions.create(
            principal.tenant_id, body.url, body.event_types, body.description, body.enabled
        )
    except InvalidTargetURL as exc:
        raise _invalid("url", str(exc)) from exc
    except InvalidEventTypeFilter as exc:
        raise _invalid("event_types", str(exc)) from exc
    except SubscriptionLimitReached as exc:
        # 403 like the scheduler's quota refusals: the request is fine, the limit refuses it.
        raise ProblemError(
            403,
            "quota-exceeded",
            str(exc),
            extra={
                "limit": "max_subscriptions_per_tenant",
                "limit_value": exc.limit,
                "current": exc.current,
            },
        ) from exc
    except DuplicateSubscription as exc:
        raise ProblemError(
            409, "duplicate-subscription", str(exc), extra={"existing_id": exc.existing_id}
        ) from exc
    return _with_secret(created.subscription, created.secret)


@router.get(
    "/",
    operation_id="listSubscriptions",
    response_model=Page[SubscriptionOut],
    responses=LIST_ERRORS,
)
async def list_subscriptions(
    principal: Read, c: Box, after: After, limit: Limit = LIMIT_DEFAULT
) -> Page[SubscriptionOut]:
    rows = await c.store.list_subscriptions(principal.tenant_id, limit + 1, after)
    page, next_cursor = split_page(rows, limit, key=lambda s: (s.created_at, s.id))
    return Page(items=[SubscriptionOut.of(s) for s in page], next_cursor=next_cursor)


@router.get("/{sub_id}", operation_id="getSubscription", response_model=SubscriptionOut)
async def get_subscription(sub_id: IdPath, principal: Read, c: Box) -> SubscriptionOut:
    sub = await c.store.get_subscription(principal.tenant_id, sub_id)
    if sub is None:
        raise not_found("subscription", sub_id)
    return SubscriptionOut.of(sub)


@router.patch(
    "/{sub_id}",
    operation_id="updateSubscription",
    response_model=SubscriptionOut,
    responses=BODY_ERRORS,
)
async def update_subscription(
    sub_id: IdPath, body: SubscriptionPatch, principal: Write, c: Box
) -> SubscriptionOut:
    changes = body.model_dump(exclude_unset=True)
    for field in ("url", "event_types", "enabled"):
        if field in changes and changes[field] is None:
            raise _invalid(field, "may not be null")
    try:
        sub = await c.subscriptions.update(principal.tenant_id, sub_id, changes)
    except SubscriptionNotFound as exc:
        raise not_found("subscription", sub_id) from exc
    except InvalidTargetURL as exc:
        raise _invalid("url", str(exc)) from exc
    except InvalidEventTypeFilter as exc:
        raise _invalid("event_types", str(exc)) from exc
    return SubscriptionOut.of(sub)


@router.delete("/{sub_id}", operation_id="deleteSubscription", status_code=204)
async def delete_subscription(sub_id: IdPath, principal: Write, c: Box) -> Response:
    try:
        await c.subscriptions.delete(principal.tenant_id, sub_id)
    except SubscriptionNotFound as exc:
        raise not_found("subscription", sub_id) from exc
    return Response(status_code=204)


@router.post(
    "/{sub_id}/secret/rotate",
    operation_id="rotateSubscriptionSecret",
    response_model=SubscriptionWithSecretOut,
)
async def rotate_secret(sub_id: IdPath, principal: Write, c: Box) -> SubscriptionWithSecretOut:
    try:
        rotated = await c.subscriptions.rotate_secret(principal.tenant_id, sub_id)
    except SubscriptionNotFound as exc:
        raise not_found("subscription", sub_id) from exc
    return _with_secret(rotated.subscription, rotated.secret)


@deliveries_router.get(
    "/{sub_id}/deliveries",
    operation_id="listDeliveries",
    response_model=Page[DeliveryOut],
    responses=LIST_ERRORS,
)
async def list_deliveries(
    sub_id: IdPath, principal: Read, c: Box, after: After, limit: Limit = LIMIT_DEFAULT
) -> Page[DeliveryOut]:
    if await c.store.get_subscription(principal.tenant_id, sub_id) is None:
        raise not_found("subscription", sub_id)
    rows = await c.store.list_deliveries(principal.tenant_id, sub_id, limit + 1, after)
    page, next_cursor = split_page(rows, limit, key=lambda d: (d.created_at, d.id))
    return Page(items=[DeliveryOut.of(d) for d in page], next_cursor=next_cursor)


@deliveries_router.post(
    "/{sub_id}/deliveries/{delivery_id}/replay",
    status_code=202,
    response_model=DeliveryOut,
    operation_id="replayDelivery",
)
async def replay_delivery(
    sub_id: IdPath, delivery_id: IdPath, principal: Write, c: Box
) -> DeliveryOut:
    replayed = await c.store.replay_delivery(principal.tenant_id, sub_id, delivery_id, c.clock())
    if replayed is None:
        raise not_found("delivery", delivery_id)
    return DeliveryOut.of(replayed)
