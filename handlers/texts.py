"""Every sentence the handlers show people, in one place (bolt's logger/messages.py, in spirit).

Formatting helpers take plain values; nothing here touches the store, the backend or the chat.
"""

from __future__ import annotations

from jobs.wording import Counted

# ---------------------------------------------------------------- errors and refusals
UNEXPECTED_ERROR = "Something went wrong on our side; it has been logged. Try again in a minute."
UNKNOWN_COMMAND = "Unknown command {name}: try /train help."
UNKNOWN_ACTION = "That button is no longer handled; run the command again."
NOT_AVAILABLE = "{feature} is not set up on this bot yet."
STALE_BUTTON = "That card has expired; run /train again to get a fresh one."
USAGE_JOB = "Usage: /job ID (a lineage id or a SageMaker job name). /jobs lists them."
USAGE_STOP = "Usage: /stop ID (a lineage id or a SageMaker job name). /jobs lists them."
ALREADY_ENDED = "{lineage} has already ended (it {status}); there is nothing to stop."
CHAT_NEEDS_RETRY = "The chat did not take a message; it will be retried."

# ---------------------------------------------------------------- /train and the plan card
PLAN_TITLE = "Plan: {model} on {count} x {instance}"
HELP_TITLE = "/train help"
HELP_CONTINUED = "{title} (continued)"
HELP_FALLBACK = "{usage}. {key}"
PLAN_FALLBACK = "Plan for {model} on {count} x {instance}: {likely}. Press Launch to start it."
PLAN_FALLBACK_WORST = "at most {worst}"
PLAN_FORECAST = "Forecast: {summary} ({basis})."
PLAN_NO_FORECAST = "Forecast: none, {reason}."
PLAN_RUN_FORECAST = "; this run: {summary} ({basis})"
PLAN_SPOT = "Managed spot: about {spot_cost} instead of {on_demand_cost} on demand (saves ~{pct:.0f}%, {saved})."
PLAN_SPOT_OFF = "On demand. With spot=yes it would cost about {pct:.0f}% less (checkpoints make it resumable)."
PLAN_COST = Counted("Worst case {worst}: {attempts:attempt} of max_run on {count} x {instance} at on-demand prices.")
#: The price an hour now, all instances together: once, on its own line.
PLAN_PRICE_SPOT = "Price: about {spot}/h at spot for {count} x {instance} ({on_demand}/h on demand)."
PLAN_PRICE = "Price: {on_demand}/h on demand for {count} x {instance}."
PLAN_CAPPED = "Relaunches stop at the per-job cap of {cap}."
PLAN_BUDGET = "Per-job cap {cap}."
PLAN_SCALING = ":information_source: {note}"
PLAN_CHECKPOINTS = (
    "Checkpoints at least every {minutes} (and every {steps} steps): an interruption costs at most {minutes} of "
    "training."
)
PLAN_COMMAND = "`{command}`"
BUTTON_LAUNCH = "Launch"
BUTTON_EDIT = "Edit"
BUTTON_CANCEL = "Cancel"
BUTTON_STOP = "Stop"
BUTTON_DEPLOY = "Deploy"
CONFIRM_STOP_TITLE = "Stop {lineage}?"
CONFIRM_STOP_TEXT = "The container gets SIGTERM and 120 s to save a checkpoint; billing stops when it ends."
CONFIRM_STOP_YES = "Stop it"
CONFIRM_NO = "Keep running"
CONFIRM_KEEP = "Keep it"
CONFIRM_UNDEPLOY_TITLE = "Undeploy {name}?"
CONFIRM_UNDEPLOY_TEXT = ("The endpoint {name} and its config are deleted ({hourly} stops); the model is kept. "
                         "Applications calling {name} get errors until it is deployed again.")
CONFIRM_UNDEPLOY_YES = "Undeploy it"
CONFIRM_ROLLBACK_TITLE = "Roll {name} back?"
CONFIRM_ROLLBACK_TEXT = "{name} goes back, in place, to the model it served before {lineage}; {lineage}'s model package is rejected."
CONFIRM_ROLLBACK_YES = "Roll it back"
CANCELLED = "Cancelled: nothing was launched."
RESOLVING_CODE = "Resolving {source} to its commit… the plan card follows in a moment."
READING_CODE = "Reading {source}… the plan card follows in a moment."
CODE_HOST_BUSY_USER = (
    "You already have {count} requests waiting on git hosts or code tarballs (the most one person may have): "
    "wait for one to finish, then try again."
)
CODE_HOST_BUSY = (
    "The bot already has {count} requests waiting on git hosts or code tarballs: try again in a minute."
)
LAUNCHING_EPHEMERAL = "Launching {model}: the job card is in this channel and its thread has the progress."
# Where a job's card and thread live: a conversation the bot can post in (a DM between people or a private
# channel it was not invited to takes a slash command, but no post from the bot).
BUTTON_LAUNCH_DM = "Launch in DM"
PLAN_IN_DM = (
    ":warning: I can't post in this conversation, so a job's card and thread can't live here: `/invite @trainbot` "
    "(or run /train in a channel I'm in), or press *{button}* to follow this job in a DM with me."
)
PLAN_FROM_DM = (
    ":speech_balloon: The job's card and thread will be in your DM with trainbot (Slack lets me post in no other DM); "
    "press *{button}* to start it there."
)
LAUNCHING_IN_DM = "Launching {model}: the job card is in your DM with trainbot and its thread has the progress."
CANNOT_POST_HERE = (
    "Nothing was launched: I can't post in this conversation (a DM between people, or a private channel I'm not "
    "in), so the job would have no card or thread: `/invite @trainbot` here or run /train in a channel I'm in, "
    "then press Launch again."
)
NO_DM_FOR_CARD = "Nothing was launched: Slack did not take the job's card in your DM with me ({reason}); press Launch again in a moment."
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
    "distribution": "Distribution (none, ddp, fsdp; legacy: data, model)",
    "spot": "Managed spot (yes/no)",
    "max_run": "Max run (3600, 90m, 2h)",
    "max_wait": "Max wait, spot only (blank: default)",
    "options": "Other options (preset, hp.NAME=VALUE, ...)",
}

# ---------------------------------------------------------------- the launch card
CARD_TITLE = "{lineage}"
CARD_FALLBACK = "{lineage}: {status}"
CARD_LAUNCHING = "Launching…"
#: A local run's cost: priced at SageMaker's rates for its instance type and time, billed nothing. A message
#: says it once (its card's context line, its summary), its figures are plain amounts.
LOCAL_PRICE = "{cost} on SageMaker (free here)"
LOCAL_PRICES_NOTE = "A local run: its costs are what SageMaker would bill, free here."
#: The card's live progress with when it was read: under load a card's refresh stretches, and says so.
CARD_PROGRESS_AS_OF = "{progress}\n_as of {when}_"
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
# "2 on ml.g5.xlarge (spot): 1 GPU as planned, Training": {change} says what another type changed (jobs.planning.batch).
ATTEMPT_LINE = "{number} on {instance} ({market}){change}{detail}"
# The forecast of a relaunched lineage is its attempt's, on the type it runs on now.
CARD_FORECAST_ON = "{summary} (on {instance})"
CARD_THREAD_HINT = "Progress, metrics and the final report go into this thread."
REFUSED_CARD = ":no_entry: Not launched: {reason}"

# ---------------------------------------------------------------- /jobs and /job
JOBS_EMPTY = "No jobs yet. Start one with /train bert-squad spot=yes."
JOBS_TITLE = "Jobs ({count})"
JOBS_LINE = "*{lineage}* {status} · {model} · {count} x {instance}{spot} · worst case {estimate} · <@{user}>"
JOBS_MORE = "… and {count} more; /job ID shows one."
JOB_ATTEMPTS = "Attempts"
JOB_ATTEMPT_LINE = "{job}: {status}{secondary}{reason} · on {instance} ({market}){change}"
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
REPORT_RESUMED = "Resumed"
REPORT_RESUMED_VALUE = "attempt {number} from the checkpoint at step {step} ({lost})"
REPORT_LINKS = "Links"
REPORT_ATTEMPTS = "Attempts"
REPORT_CODE = "Code"
PLAN_CODE = "Code"
PLAN_CODE_VALUE = "{code}, entry {entry}"
REPORT_PLOT_TITLE = "Loss curve of {lineage}"
LOG_CUT = "… {count} earlier lines cut."
THREAD_LINK = "<#{channel}>"
BLOCKS_CUT = "… {count} more cut."

# ---------------------------------------------------------------- routed notifications (/notify)
#: One short line per event in a subscribed channel; {link} is the job's thread (a permalink where the chat
#: has them, else the channel), {who} the launcher.
ROUTED = {
    "launched": ":rocket: *{lineage}* launched by {who}: {model} on {count} x {instance}{spot}. {link}",
    "interrupted": ":pause_button: *{lineage}*: spot capacity for {instance} was reclaimed; SageMaker resumes "
                   "it from its checkpoint ({who}). {link}",
    "relaunched": ":recycle: *{lineage}* relaunched as {job} (attempt {attempt}, {instance}, {market}{change}) ({who}). {link}",
    "completed": ":white_check_mark: *{lineage}* completed{metrics}, cost {cost} ({who}). {link}",
    "failed": ":x: *{lineage}* failed: {reason} ({who}). {link}",
    "gave-up": Counted(":warning: *{lineage}*: gave up after {attempts:attempt}: {reason} ({who}). {link}"),
    "regression": ":chart_with_downwards_trend: *{lineage}* (schedule {schedule}) regressed against {previous}: "
                  "{changes} ({who}). {link}",
    "endpoint-idle": Counted(":money_with_wings: {count:endpoint} idle for more than {hours} h: {names}; "
                             "{total} so far. `/undeploy NAME` stops the cost."),
}
ROUTED_LINK = "<{url}|Thread>"
ROUTED_NO_THREAD = "(no thread: launched outside a channel)"
METRICS_PREFIX = ": "
REGRESSION_CHANGE = "{name} {before:g} → {after:g} ({points:+.2f} points)"

# ---------------------------------------------------------------- DMs when a job ends
DM = {
    "completed": "Your job *{lineage}* completed{metrics}. Cost {cost}{savings}. {link}",
    "failed": "Your job *{lineage}* failed: {reason}. Cost {cost}. The last log lines are in its thread "
              "(`/logs {lineage}` shows more): {link}",
    "gave_up": Counted("Trainbot gave up on your job *{lineage}* after {attempts:attempt}: {reason}. Cost {cost}. "
                       "{link}"),
    "stopped": "Your job *{lineage}* was stopped{reason}. Cost {cost}. {link}",
}
DM_SAVINGS = ", spot savings {savings}"
THREAD_IN = "Its thread: {link}"

# ---------------------------------------------------------------- /notify
NOTIFY_ON = "This channel now gets {events} for {what}."
NOTIFY_REPLACED = "Your subscription of this channel for {what} now has {events} (it had {old})."
NOTIFY_OTHERS_KEPT = " The subscriptions of {who} here stay as they are."
NOTIFY_NO_SCHEDULE = " (No schedule is named {name} yet: it applies once one is.)"
NOTIFY_OFF = Counted("Removed {count:subscription} from this channel.")
NOTIFY_OFF_NONE = "This channel has no subscription{what}; /notify list shows them."
NOTIFY_OFF_KEPT = Counted(" {count} added by someone else {count:=stays|stay} ({who}): only they or an admin may remove "
                          "them.")
NOTIFY_LIST_EMPTY = "This channel has no subscriptions. /notify on subscribes it to failed, gave-up and regression."
NOTIFY_LIST_HEAD = "This channel's subscriptions:"
NOTIFY_LIST_LINE = "• {events} for {what} (added by {who})"
NOTIFY_DM_STATE = "Your DMs: {state}."
NOTIFY_DM_ON = "You will get a DM when each of your jobs ends (notify=none on /train skips one)."
NOTIFY_DM_OFF = "No more DMs when your jobs end, failures included (notify=dm on /train asks for one)."
NOTIFY_DM_DEFAULT = "failures and give-ups only (the default; /notify dm on for every ending)"

# ---------------------------------------------------------------- /logs and the Logs button
USAGE_LOGS = "Usage: /logs JOB [N]: the last N lines (default 40, at most 500) of each host's log. /jobs lists the jobs."
LOGS_FETCHING = Counted("Reading the last {lines:line} of {job}'s log…")
LOGS_TITLE = Counted("Logs of {job}: last {lines:line} of {hosts:host}")
LOGS_HOST = Counted("*{label}* ({count:line})")
LOGS_EMPTY = "{job} has no log lines yet."
LOGS_FILE = Counted("{job}: {count:log line} of {hosts:host} {count:=is|are} longer than a message; {count:=it is|they are} "
                    "in the file {where}.")
LOGS_FILE_TITLE = Counted("Last {lines:line} of {job}'s log ({hosts:host})")
LOGS_FILE_THREAD = "posted in the job's thread"
LOGS_FILE_HERE = "posted in this channel"
LOGS_FAILED = "Could not read the logs of {job}: {reason}"
BUTTON_LOGS = "Logs"
BUTTON_UNDEPLOY = "Undeploy"

# ---------------------------------------------------------------- the App Home (and /home in the console)
HOME_TITLE = "trainbot"
HOME_UPDATED = "For {who} · updated {at} · /train to start a job, /notify to route notifications"
HOME_RUNNING = "Your running jobs"
HOME_RUNNING_NONE = "Nothing of yours is running. `/train bert-squad spot=yes` starts one."
HOME_RUNNING_LINE = "*{lineage}* {status} · {model} on {count} x {instance}{spot}{step} · {cost} so far"
HOME_STEP = " · step {step}/{total}"
HOME_RECENT = "Your recent jobs"
HOME_RECENT_NONE = "No ended jobs yet."
HOME_RECENT_LINE = "*{lineage}* {status} · {model} · {cost} · ended {ended}"
HOME_SPEND = "Team spend"
HOME_SPEND_LINE = "Today {today} · this week {week}"
HOME_BUDGET_LINE = "Today's jobs and endpoints could cost up to {committed} of the {budget} daily budget ({pct:.0f}%)."
HOME_NO_BUDGET = "No daily budget is set (TRAINBOT_DAILY_BUDGET_USD)."
HOME_ENDPOINTS = "Live endpoints"
HOME_ENDPOINTS_NONE = "No endpoints are up."
HOME_ENDPOINT_LINE = "*{name}* {status} · {where} · {hourly} · from {lineage}"
HOME_SCHEDULES = "Schedules"
HOME_SCHEDULES_NONE = "No schedules. `/schedule add NAME cron=\"0 2 * * *\" TEXT` adds one."
HOME_SCHEDULE_LINE = "*{name}* `{cron}` ({tz}) · next run {next_run}"
HOME_MORE = "… and {count} more."
HOME_MORE_RUNNING = "… and {count} more running: `/jobs active` lists them all."
HOME_MORE_ENDPOINTS = "… and {count} more endpoints."
HOME_MORE_ENDPOINTS_TAB = "… and {count} more endpoints: the trainbot Home tab shows up to 10."

# ---------------------------------------------------------------- who may read logs, and how often (issue 34)

LOGS_TOO_OFTEN = (
    "You asked for logs more than {per_minute:g} times a minute (TRAINBOT_MAX_LOGS_PER_MINUTE): try again in "
    "{seconds} s."
)
#: A routed failure line in a channel whose subscribers may not read that job's failure lines.
REASON_IN_THREAD = "the reason is in its thread"

