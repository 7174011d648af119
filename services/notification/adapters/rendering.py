"""Jinja2 alert templates: `<name>.subject.txt`, `<name>.txt`, `<name>.html` under templates/.
An unknown template name falls back to `generic`, which lists the request's data.

Every template sees `console_url`, the console's public origin (CONSOLE_PUBLIC_URL) or None:
links to its pages are `{console_url}/#/schedules/{id}` and `.../runs/{run_id}` (the console's
hash routes). The alert requests carry ids, not URLs, so the origin is this service's setting."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jinja2 import (
    Environment,
    FileSystemLoader,
    StrictUndefined,
    TemplateNotFound,
    select_autoescape,
)

from notification.service_layer.ports import RenderedAlert

TEMPLATES_DIR = Path(__file__).with_name("templates")
MAX_SUBJECT_CHARS = 200


class JinjaAlertRenderer:
    def __init__(self, directory: Path = TEMPLATES_DIR, *, console_url: str | None = None) -> None:
        self.console_url = console_url
        loader = FileSystemLoader(str(directory))
        # HTML is autoescaped (tenant-supplied names end up in it); text is not.
        self.html = Environment(
            loader=loader, autoescape=select_autoescape(["html"]), undefined=StrictUndefined
        )
        self.text = Environment(loader=loader, autoescape=False, undefined=StrictUndefined)  # noqa: S701

    def render(self, template: str, data: Mapping[str, Any]) -> RenderedAlert:
        name = template
        try:
            self.text.get_template(f"{name}.txt")
        except TemplateNotFound:
            name = "generic"
        context = {
            "template": template,
            "data": dict(data),
            **dict(data),
            "console_url": self.console_url,
        }
        try:
            subject = self.text.get_template(f"{name}.subject.txt").render(context)
            text = self.text.get_template(f"{name}.txt").render(context)
            html = self.html.get_template(f"{name}.html").render(context)
        except Exception:  # a request missing a field the template needs: still alert
            name = "generic"
            subject = self.text.get_template("generic.subject.txt").render(context)
            text = self.text.get_template("generic.txt").render(context)
            html = self.html.get_template("generic.html").render(context)
        subject = " ".join(subject.split())[:MAX_SUBJECT_CHARS]
        return RenderedAlert(title=subject, subject=subject, text=text, html=html)
