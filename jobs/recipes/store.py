"""The recipes table (created by Alembic revision 0004) and the record read from it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Row


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
