"""After an ending: what follows a lineage's end (the report, the curves, the log tail, the history record
later forecasts learn from, the announcement), as steps that are each idempotent and each retried on its
own. Chat-free: it runs wherever jobs are watched (`trainbot watch`, `serve`, `console`, `status`)."""
