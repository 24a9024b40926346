"""Team recipes: named /train arguments, saved in the database or kept in git (TRAINBOT_RECIPES_FILE)."""
