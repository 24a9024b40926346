"""The core: job specs, plans, pricing, the store, the watcher and recovery policy.

Nothing here imports Slack, AWS or APScheduler; only ``jobs.backends`` touches the cloud
or local processes.
"""
