"""Page iterators: follow `next_cursor` until it is null, at most `max_pages` pages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Protocol, TypeVar

from schedulerclient.errors import PageLimitError

T_co = TypeVar("T_co", covariant=True)


class Page(Protocol[T_co]):
    """A list answer: `{"items": [...], "next_cursor": ...}`."""

    @property
    def items(self) -> Sequence[T_co]: ...

    @property
    def next_cursor(self) -> str | None: ...


def _check(max_pages: int) -> None:
    if max_pages < 1:
        raise ValueError("max_pages must be >= 1")


def _exceeded(max_pages: int) -> PageLimitError:
    return PageLimitError(f"more than {max_pages} pages; raise max_pages or narrow the filters")


def iterate_pages(fetch: Callable[[str | None], Page[T_co]], max_pages: int) -> Iterator[T_co]:
    _check(max_pages)
    cursor: str | None = None
    for _ in range(max_pages):
        page = fetch(cursor)
        yield from page.items
        if page.next_cursor is None:
            return
        cursor = page.next_cursor
    raise _exceeded(max_pages)


async def aiterate_pages(
    fetch: Callable[[str | None], Awaitable[Page[T_co]]], max_pages: int
) -> AsyncIterator[T_co]:
    _check(max_pages)
    cursor: str | None = None
    for _ in range(max_pages):
        page = await fetch(cursor)
        for item in page.items:
            yield item
        if page.next_cursor is None:
            return
        cursor = page.next_cursor
    raise _exceeded(max_pages)
