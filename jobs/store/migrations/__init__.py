"""The store's Alembic revisions (``versions/``) and the environment that runs them (``env.py``).

``python -m jobs.store.migrations "why"`` writes the next revision from the difference between the
tables in ``jobs/store/schema.py`` (and the modules it names) and a database migrated to head.
"""
