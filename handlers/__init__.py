"""Chat-agnostic command and button handlers: Slack and the console call the same functions.

This package is the only place where `jobs.errors` exceptions become replies.
"""
