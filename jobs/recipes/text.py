"""Every sentence the recipe commands show people, and how a recipe and the list of them read."""

from __future__ import annotations

from collections.abc import Sequence

from jobs.recipes.store import Recipe

USAGE = (
    "/recipe save NAME <train arguments> | list | show NAME | remove NAME, "
    "e.g. /recipe save squad-nightly bert-squad spot=yes epochs=1; then /train squad-nightly instances=4."
)
SAVED = "Recipe {name} saved: /train {name} runs `{text}`; keys typed after its name override it."
REPLACED = "Recipe {name} changed: /train {name} now runs `{text}`."
REMOVED = "Recipe {name} removed."
NONE_YET = "No recipes yet: /recipe save NAME <train arguments> names a set-up for /train NAME."
NOT_FOUND = "No recipe is named {name!r}: /recipe list shows them."
EMPTY = "A recipe needs /train arguments after its name, e.g. /recipe save squad-nightly bert-squad spot=yes."
BAD_NAME = (
    "Recipe name {name!r} is not valid: use lowercase letters, digits, - and _ (at most 64), starting with a letter "
    "or digit."
)
PRESET_NAME = "{name} is a built-in preset ({presets}); a recipe cannot shadow it: pick another name."
KEY_NAME = "{name} is a {command} key or command word; a recipe cannot take it: pick another name."
SAME_NAME = (
    "A recipe named {existing} exists and - and _ read alike in recipe names: use {existing} (or another name)."
)
TOO_MANY = (
    "You have saved {count} recipes, the most one person may (TRAINBOT_MAX_RECIPES_PER_USER): remove one with "
    "/recipe remove NAME, or change one of yours by saving it again."
)
NOT_AUTHOR = "Only the author of recipe {name} ({author}) or an admin may {verb} it; save yours under another name."
IN_FILE = "Recipe {name} is kept in {path} (TRAINBOT_RECIPES_FILE): change it there, or save yours under another name."
FILE_UNREADABLE = "The recipes file {path} (TRAINBOT_RECIPES_FILE) cannot be read: {reason}."
FILE_SHAPE = "The recipes file {path} must be a YAML mapping of NAME: \"train arguments\" (optionally under recipes:)."
FILE_VALUE = "its value must be the /train arguments as one string, e.g. \"bert-squad spot=yes\""


def render_recipe(recipe: Recipe) -> str:
    where = f"kept in {recipe.source}" if recipe.read_only else f"saved by {recipe.created_by}"
    return f"{recipe.name}: /train {recipe.text}   ({where})"


def render_list(recipes: Sequence[Recipe], problems: Sequence[str] = ()) -> str:
    lines = [render_recipe(r) for r in recipes] or [NONE_YET]
    lines += [f"left out of the recipes file: {problem}" for problem in problems]
    return "\n".join(lines)
