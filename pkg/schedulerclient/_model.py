"""Base classes of the generated models (`schedulerclient.models`).

Answers are read leniently: a field the server adds later is kept (`extra="allow"`), so an
older client still reads a newer server. Request bodies refuse unknown fields, as the API does.
Fields whose names are Python keywords carry a trailing underscore (`from_`) and their JSON name
as the alias; both spellings are accepted.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        populate_by_name=True,
        use_attribute_docstrings=True,
        protected_namespaces=(),
    )


class InputModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        use_attribute_docstrings=True,
        protected_namespaces=(),
    )
