"""The composition root: settings, chat surfaces, scheduler wiring, the CLI, process start and stop."""
