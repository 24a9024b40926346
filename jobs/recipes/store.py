"""The recipes table (created by Alembic revision 0004) and the record read from it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Column, String, Table, Text
from sqlalchemy.engine import Row

from jobs.store.schema import UTCDateTime, metadata

recipes_table = Table(
    "recipes", metadata,
    Column("name", String(64), primary_key=True),
    Column("text", Text, nullable=False),  # the /train arguments, as validated when saved
    Column("created_by", String(64), nullable=False),  # the author: only they or an admin change it
    Column("via", String(32), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)




@dataclass(frozen=True)
class Recipe:
    name: str
    text: str
    created_by: str  # a user id; "file" for a recipe from TRAINBOT_RECIPES_FILE
    source: str  # "database" or the recipes file's path
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def read_only(self) -> bool:
        return self.source != "database"


def recipe_from_row(row: Row[Any]) -> Recipe:
    return Recipe(name=row.name, text=row.text, created_by=row.created_by, source="database",
                  created_at=row.created_at, updated_at=row.updated_at)
