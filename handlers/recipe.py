"""/recipe: save, list, show and remove team recipes (the same for Slack and the console).

``/recipe save NAME <train arguments>`` is validated as /train validates it; ``/train NAME key=value ...`` then
starts from it. Refusals (bad input, permissions) are raised to the router, which answers with one sentence.
"""

from __future__ import annotations

from handlers import blocks as bk
from handlers.chat import Reply
from handlers.context import CommandContext
from jobs.recipes import text as recipe_text
from jobs.recipes.service import RecipeBook

NOT_SET_UP = "Recipes are not set up on this bot yet."
UNKNOWN_VERB = "Unknown /recipe command {verb!r}: use save, list, show or remove (or help)."
USAGE_NAME = "Usage: /recipe {verb} NAME; /recipe list shows the names."


def handle_recipe(ctx: CommandContext, text: str) -> Reply:
    verb, _, rest = text.strip().partition(" ")
    verb = verb.lower()
    if verb in ("", "help"):
        return Reply(text=recipe_text.USAGE)
    book: RecipeBook | None = ctx.services.recipes
    if book is None:
        return Reply(text=NOT_SET_UP)
    if verb == "list":
        return Reply(text=_code_block(recipe_text.render_list(book.list(), book.file_problems())))
    if verb not in ("save", "show", "remove"):
        return Reply(text=UNKNOWN_VERB.format(verb=bk.escape(verb[:40])))
    name, _, args = rest.strip().partition(" ")
    if not name:
        return Reply(text=USAGE_NAME.format(verb=verb if verb != "save" else "save NAME <train arguments> and"))
    if verb == "show":
        return Reply(text=_code_block(recipe_text.render_recipe(book.show(name))))
    if verb == "remove":
        book.remove(name, actor=ctx.actor)
        return Reply(text=recipe_text.REMOVED.format(name=name))
    recipe, replaced = book.save(name, args, actor=ctx.actor)
    message = recipe_text.REPLACED if replaced else recipe_text.SAVED
    return Reply(text=message.format(name=recipe.name, text=bk.escape(recipe.text)))


def _code_block(text: str) -> str:
    return f"```{bk.truncate(bk.escape(text), bk.MAX_TEXT - 6)}```"
