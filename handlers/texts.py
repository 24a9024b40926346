"""Every sentence the handlers show people, in one place (bolt's logger/messages.py, in spirit).

Formatting helpers take plain values; nothing here touches the store, the backend or the chat.
"""

from __future__ import annotations

# ---------------------------------------------------------------- errors and refusals
UNEXPECTED_ERROR = "Something went wrong on our side; it has been logged. Try again in a minute."
UNKNOWN_COMMAND = "Unknown command {name}: try /train help."
UNKNOWN_ACTION = "That button is no longer handled; run the command again."
NOT_AVAILABLE = "{feature} is not set up on this bot yet."
STALE_BUTTON = "That card has expired; run /train again to get a fresh one."
USAGE_JOB = "Usage: /job ID (a lineage id or a SageMaker job name). /jobs lists them."
USAGE_STOP = "Usage: /stop ID (a lineage id or a SageMaker job name). /jobs lists them."
ALREADY_ENDED = "{lineage} has already ended ({status}); there is nothing to stop."
CHAT_NEEDS_RETRY = "The chat did not take a message; it will be retried."

# ---------------------------------------------------------------- /train and the plan card
PLAN_TITLE = "Plan: {model} on {count} x {instance}"
PLAN_FALLBACK = "Plan for {model} on {count} x {instance}: {likely}. Press Launch to start it."
PLAN_FALLBACK_WORST = "at most {worst}"
PLAN_FORECAST = "Forecast: {summary} ({basis})."
PLAN_NO_FORECAST = "Forecast: none, {reason}."
PLAN_RUN_FORECAST = "; this run: {summary} ({basis})"
PLAN_SPOT = "Managed spot: about {spot_cost} instead of {on_demand_cost} on demand (saves ~{pct:.0f}%, {saved})."
PLAN_SPOT_OFF = "On demand. With spot=yes it would cost about {pct:.0f}% less (checkpoints make it resumable)."
PLAN_COST = ("Worst case {worst}: {attempts} attempts of max_run on {count} x {instance} at on-demand prices "
             "({hourly}/h for all instances now).")
PLAN_CAPPED = "Relaunches stop at the per-job cap of {cap}."
PLAN_BUDGET = "Per-job cap {cap}."
PLAN_SCALING = ":information_source: {note}"
PLAN_COMMAND = "`{command}`"
BUTTON_LAUNCH = "Launch"
BUTTON_EDIT = "Edit"
BUTTON_CANCEL = "Cancel"
BUTTON_STOP = "Stop"
BUTTON_DEPLOY = "Deploy"
CONFIRM_STOP_TITLE = "Stop this job?"
CONFIRM_STOP_TEXT = "The container gets SIGTERM and 120 s to save a checkpoint; billing stops when it ends."
CONFIRM_STOP_YES = "Stop it"
CONFIRM_NO = "Keep running"
CANCELLED = "Cancelled: nothing was launched."
LAUNCHING_EPHEMERAL = "Launching {model}: the job card is in this channel and its thread has the progress."
ALREADY_LAUNCHED = "That plan was already launched as {lineage}."
LAUNCH_REFUSED = "Not launched: {reason}"
EDIT_REPROMPT = "Edit the command and send it again:\n`/train {command}`"

# ---------------------------------------------------------------- the edit modal
MODAL_TITLE = "Edit training job"
MODAL_SUBMIT = "Show plan"
MODAL_CLOSE = "Cancel"
MODAL_LABELS = {
    "model": "Model",
    "dataset": "Dataset",
    "instance_type": "Instance type",
    "instance_count": "Instances",
    "distribution": "Distribution (none, data, model, ddp)",
    "spot": "Managed spot (yes/no)",
    "max_run": "Max run (3600, 90m, 2h)",
    "max_wait": "Max wait, spot only (blank: default)",
    "options": "Other options (preset, hp.NAME=VALUE, ...)",
}

# ---------------------------------------------------------------- the launch card
CARD_TITLE = "{lineage}"
CARD_FALLBACK = "{lineage}: {status}"
CARD_LAUNCHING = "Launching…"
CARD_FIELDS = {
    "status": "Status",
    "attempt": "Attempt",
    "instances": "Instances",
    "cost": "Cost so far",
    "forecast": "Forecast",
    "progress": "Progress",
    "estimate": "Worst case",
    "launched_by": "Launched by",
}
STATUS_WORDS = {
    "pending": ":hourglass_flowing_sand: pending",
    "running": ":arrows_counterclockwise: running",
    "relaunching": ":recycle: relaunching",
    "completed": ":white_check_mark: completed",
    "failed": ":x: failed",
    "stopped": ":octagonal_sign: stopped",
    "gave_up": ":warning: gave up",
}
ATTEMPT_LINE = "{number} on {instance} ({market}){detail}"
CARD_THREAD_HINT = "Progress, metrics and the final report go into this thread."
REFUSED_CARD = ":no_entry: Not launched: {reason}"

# ---------------------------------------------------------------- /jobs and /job
JOBS_EMPTY = "No jobs yet. Start one with /train bert-squad spot=yes."
JOBS_TITLE = "Jobs ({count})"
JOBS_LINE = "*{lineage}* {status} · {model} · {count} x {instance}{spot} · worst case {estimate} · <@{user}>"
JOBS_MORE = "… and {count} more; /job ID shows one."
JOB_ATTEMPTS = "Attempts"
JOB_ATTEMPT_LINE = "{job}: {status}{secondary}{reason}"
JOB_COMMAND = "Spec"

# ---------------------------------------------------------------- /stop
STOPPING = "Stopping {lineage}: the card and its thread say when it has ended."
STOP_FAILED = "Could not stop {lineage}: {reason}"

# ---------------------------------------------------------------- notifications
REPORT_TITLE = "Final report: {lineage}"
REPORT_METRICS = "Final metrics"
REPORT_FORECAST = "Forecast vs actual"
REPORT_DETAILS = "Trainer details: {details}"
REPORT_COST = "Cost"
REPORT_SAVINGS = "Spot savings"
REPORT_DURATION = "Training time"
REPORT_LINKS = "Links"
REPORT_ATTEMPTS = "Attempts"
REPORT_PLOT_TITLE = "Loss curve of {lineage}"
LOG_CUT = "… {count} earlier lines cut."
FAILED_DM = "Your job {lineage} failed: {reason}. The log tail is in its thread: {link}"
GAVE_UP_DM = "Trainbot gave up on your job {lineage}: {reason}. Details are in its thread: {link}"
THREAD_LINK = "<#{channel}>"
BLOCKS_CUT = "… {count} more cut."
