"""Who hears about what: channel subscriptions to job events, per-user DM defaults, and the routing rules.

`rules` is pure (the event names, /notify's grammar, what a subscription matches); `store` owns the tables;
`service` applies the access rules and answers "which channels get this event" and "does this person want
a DM". The chat side (rendering, posting) lives in handlers/routing.py.
"""
